// The head view, drawn in the browser: one layer's heads as lines from each query token (left)
// to the key tokens it reads (right), like BertViz's head view. Pointing at a token shows only
// its lines; clicking a query token keeps them (clicking it again lets go); clicking a head's
// colour chip switches that head on or off, double-clicking shows it alone. Hovering needs no
// server; a click or a chip sends one trigger ("query" or "heads") so that the page's URL keeps
// the choice. Data: see explorer/components/head_view.py. Every token is drawn with
// textContent, never as HTML: the sentence comes from the user.

const SVG = "http://www.w3.org/2000/svg";
const ALL = -1; // data.query when no query token is kept
const DOUBLE_CLICK_MS = 250; // a chip's second click within this time isolates the head
// The chips wrap onto another row beyond this width, or the drawing's where that is wider: 8 heads fit one
// row, and in presenter mode's larger type the chips wrap rather than widen the drawing beyond the column.
const CHIP_ROW_PX = 640;

function element(name, attributes = {}, text = null) {
  const node = document.createElementNS(SVG, name);
  for (const [key, value] of Object.entries(attributes)) node.setAttribute(key, value);
  if (text !== null) node.textContent = text;
  return node;
}

function textWidth(text, font) {
  const context = (textWidth.canvas ??= document.createElement("canvas")).getContext("2d");
  context.font = font;
  return context.measureText(text).width;
}

function download(url, filename) {
  const link = document.createElement("a");
  link.href = url;
  link.download = filename;
  document.body.appendChild(link);
  link.click();
  link.remove();
}

function svgText(svg) {
  return new XMLSerializer().serializeToString(svg);
}

function downloadSvg(svg, filename) {
  const url = URL.createObjectURL(new Blob([svgText(svg)], { type: "image/svg+xml" }));
  download(url, `${filename}.svg`);
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

function downloadPng(svg, filename) {
  const width = Number(svg.getAttribute("width"));
  const height = Number(svg.getAttribute("height"));
  const image = new Image();
  image.onload = () => {
    const canvas = document.createElement("canvas");
    canvas.width = width * 2; // twice the size on screen, like the charts' camera button
    canvas.height = height * 2;
    const context = canvas.getContext("2d");
    context.fillStyle = "white";
    context.fillRect(0, 0, canvas.width, canvas.height);
    context.drawImage(image, 0, 0, canvas.width, canvas.height);
    download(canvas.toDataURL("image/png"), `${filename}.png`);
  };
  image.src = `data:image/svg+xml;charset=utf-8,${encodeURIComponent(svgText(svg))}`;
}

function draw(root, data, setTriggerValue) {
  const scale = data.scale;
  const fontSize = 13 * scale;
  const fontFamily = getComputedStyle(root).fontFamily || "sans-serif";
  const font = `${fontSize}px ${fontFamily}`;
  const rowHeight = 22 * scale;
  const gap = 220 * scale; // horizontal room for the lines
  const nHeads = data.colours.length;
  let heads = new Set(data.heads);
  let kept = data.query; // the query token whose lines stay, or ALL

  const widest = (tokens) => Math.max(24, ...tokens.map((token) => textWidth(token.text, font)));
  const left = widest(data.queries) + 16 * scale; // x where the query column ends
  const right = left + gap; // x where the key column starts
  const titleSize = 17 * scale;
  const titleWidth = textWidth(data.title, `${titleSize}px ${fontFamily}`) + 4;
  // wide enough for the tokens and for the title: with one-letter tokens the title is the widest part
  const contentWidth = Math.max(right + widest(data.keys) + 16 * scale, titleWidth);
  const titleHeight = 30 * scale;
  const chipHeight = 24 * scale;
  const chipGap = 8 * scale;
  const chipsTop = titleHeight + 4 * scale;

  // the colour chips' places, row by row
  const chipRowLimit = Math.max(contentWidth, CHIP_ROW_PX);
  const chipPlaces = []; // [x, y, width] of each head's chip
  let chipX = 2; // the chips' 2-pixel outline stays inside the drawing
  let chipY = chipsTop;
  for (let head = 0; head < nHeads; head++) {
    const chipWidth = textWidth(`head ${head}`, font) + 30 * scale;
    if (head > 0 && chipX + chipWidth + 2 > chipRowLimit) {
      chipX = 2;
      chipY += chipHeight + chipGap;
    }
    chipPlaces.push([chipX, chipY, chipWidth]);
    chipX += chipWidth + chipGap;
  }
  const width = Math.max(contentWidth, ...chipPlaces.map(([x, , chipWidth]) => x + chipWidth + 2));
  const tokensTop = chipY + chipHeight + 18 * scale;
  const rows = Math.max(data.queries.length, data.keys.length);
  const height = tokensTop + rows * rowHeight + 8 * scale;

  const svg = element("svg", {
    xmlns: SVG,
    width,
    height,
    viewBox: `0 0 ${width} ${height}`,
    "font-family": fontFamily,
    "font-size": fontSize,
    class: "hv-figure",
    role: "img",
    "aria-label": data.title,
  });
  svg.appendChild(element("rect", { width, height, fill: "white" }));
  svg.appendChild(
    element("text", { x: 0, y: titleHeight * 0.7, "font-size": titleSize, fill: "#2a3f5f", class: "hv-title" }, data.title),
  );

  // the colour chips: one per head, filled while the head is drawn
  const chips = chipPlaces.map(([x, y, chipWidth], head) => {
    const chip = element("g", { class: "hv-chip", "data-head": head, transform: `translate(${x},${y})` });
    chip.appendChild(element("title", {}, "click: switch this head on or off · double-click: only this head"));
    chip.appendChild(
      element("rect", { width: chipWidth, height: chipHeight, rx: 4 * scale, stroke: data.colours[head], "stroke-width": 2 }),
    );
    chip.appendChild(element("text", { x: chipWidth / 2, y: chipHeight * 0.7, "text-anchor": "middle" }, `head ${head}`));
    svg.appendChild(chip);
    return chip;
  });

  const rowY = (index) => tokensTop + (index + 0.5) * rowHeight;
  const lines = element("g", { class: "hv-lines", "stroke-width": 2 * scale, "stroke-linecap": "round" });
  svg.appendChild(lines);
  const drawn = []; // [line, head, query, key]
  for (let head = 0; head < nHeads; head++) {
    data.weights[head].forEach((row, query) =>
      row.forEach((weight, key) => {
        if (weight <= 0) return;
        const line = element("line", {
          x1: left + 6 * scale,
          y1: rowY(query),
          x2: right - 6 * scale,
          y2: rowY(key),
          stroke: data.colours[head],
          "stroke-opacity": Math.sqrt(weight).toFixed(3), // as the exported figure: small weights stay visible
          "data-head": head,
          "data-query": query,
          "data-key": key,
        });
        line.appendChild(
          element("title", {}, `head ${head}: ${data.queries[query].text} → ${data.keys[key].text}, weight ${weight.toFixed(3)}`),
        );
        lines.appendChild(line);
        drawn.push([line, head, query, key]);
      }),
    );
  }

  const column = (tokens, side) =>
    tokens.map((token, index) => {
      const label = element(
        "text",
        {
          x: side === "query" ? left : right,
          y: rowY(index),
          "text-anchor": side === "query" ? "end" : "start",
          "dominant-baseline": "central",
          fill: token.special ? "#6b6b6b" : "#222",
          "font-style": token.special ? "italic" : "normal",
          class: `hv-token hv-${side}`,
          "data-index": index,
        },
        token.text,
      );
      svg.appendChild(label);
      return label;
    });
  const queryLabels = column(data.queries, "query");
  const keyLabels = column(data.keys, "key");

  // focus: the token whose lines are shown ({side, index}), or null for every line
  const show = (focus) => {
    for (const [line, head, query, key] of drawn) {
      const mine = focus === null || (focus.side === "query" ? query : key) === focus.index;
      line.style.display = heads.has(head) && mine ? "" : "none";
    }
    for (const [side, labels] of [["query", queryLabels], ["key", keyLabels]]) {
      labels.forEach((label, index) => {
        const focused = focus !== null && focus.side === side && focus.index === index;
        label.setAttribute("font-weight", focused ? "bold" : "normal");
      });
    }
    queryLabels.forEach((label, index) => label.classList.toggle("hv-kept", index === kept));
    chips.forEach((chip, head) => {
      const on = heads.has(head);
      chip.classList.toggle("hv-on", on);
      chip.querySelector("rect").setAttribute("fill", on ? data.colours[head] : "white");
      chip.querySelector("text").setAttribute("fill", on ? "white" : "#444");
    });
  };
  const rest = () => show(kept === ALL ? null : { side: "query", index: kept });

  for (const [side, labels] of [["query", queryLabels], ["key", keyLabels]]) {
    labels.forEach((label, index) => {
      label.addEventListener("mouseenter", () => show({ side, index }));
      label.addEventListener("mouseleave", rest);
    });
  }
  queryLabels.forEach((label, index) =>
    label.addEventListener("click", () => {
      kept = kept === index ? ALL : index;
      rest();
      setTriggerValue("query", kept);
    }),
  );

  let pendingToggle = null;
  const sendHeads = () => setTriggerValue("heads", [...heads].sort((a, b) => a - b));
  chips.forEach((chip, head) =>
    chip.addEventListener("click", () => {
      if (pendingToggle !== null) {
        // the second click of a double-click: this head alone
        clearTimeout(pendingToggle);
        pendingToggle = null;
        heads = new Set([head]);
        rest();
        sendHeads();
        return;
      }
      pendingToggle = setTimeout(() => {
        pendingToggle = null;
        if (heads.has(head)) heads.delete(head);
        else heads.add(head);
        rest();
        sendHeads();
      }, DOUBLE_CLICK_MS);
    }),
  );
  rest();

  const tools = document.createElement("div");
  tools.className = "hv-tools";
  for (const [format, save] of [["SVG", downloadSvg], ["PNG", downloadPng]]) {
    const button = document.createElement("button");
    button.type = "button";
    button.className = `hv-download hv-download-${format.toLowerCase()}`;
    button.textContent = `Download ${format}`;
    button.addEventListener("click", () => save(svg, data.filename));
    tools.appendChild(button);
  }
  const hint = document.createElement("div");
  hint.className = "hv-hint";
  hint.textContent = data.hint;
  root.replaceChildren(svg, hint, tools);
  return () => clearTimeout(pendingToggle);
}

export default function ({ data, parentElement, setTriggerValue }) {
  const root = parentElement.querySelector(".hv-root");
  return draw(root, data, setTriggerValue);
}
