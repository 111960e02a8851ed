// The page's map: Figure 1 of the paper drawn for the open model, every box a button that opens its view.
// The encoder is on the left, the decoder on the right, the inputs at the bottom, Linear and Softmax on top; the
// boxes of a layer stand for every layer ("N×"), and the layer picker chooses which layer's numbers they show and
// which layer a click opens. Tab reaches every box; the arrow keys move between them (up and down in a column,
// left and right across). A click sends one trigger, "open": {key, layer}. Data: see
// explorer/components/figure_map.py. Every text is set with textContent, never as HTML. A rerun with the same
// model's boxes updates the drawn map in place (its numbers, the open view's box, the layer): redrawing it on
// every page run cost each edit tens of milliseconds of the browser's time.

function node(tag, className, text = null) {
  const element = document.createElement(tag);
  if (className) element.className = className;
  if (text !== null) element.textContent = text;
  return element;
}

// A box's number as drawn in it
function formatNumber(kind, value) {
  if (value === undefined || value === null) return "";
  const percent = `${Math.round(value * 100)}%`;
  if (kind === "attention") return `${value.toFixed(2)} bits`;
  if (kind === "feed_forward") return `${percent} active`;
  if (kind === "embedding") return `${percent} position`;
  if (kind === "softmax") return `p̄ ${value.toFixed(2)}`;
  return `×${value.toFixed(2)}`;
}

// Draw the map into root; returns what it keeps between runs (update): the latest data and trigger, the open view's
// boxes, the layer the picker shows, and how to refresh every box.
function draw(root, data, setTriggerValue) {
  const layerCount = Math.max(...data.stacks.map((stack) => stack.layers));
  const state = { data, send: setTriggerValue, current: new Set(data.current), layer: 0, refreshAll: null };
  state.layer = Math.min(Math.max(data.layer ?? 0, 0), layerCount - 1);
  const buttons = [];

  const boxButton = (box, stack) => {
    const button = node("button", `fm-box fm-${box.kind}`);
    button.type = "button";
    button.dataset.key = box.key;
    button.dataset.column = stack ? stack.stack : "decoder";
    const label = node("span", "fm-label", box.label);
    const number = node("span", "fm-number");
    button.append(label, " ", number);
    const refresh = () => {
      const { data, current } = state;
      const shown = box.layer_box ? Math.min(state.layer, stack.layers - 1) : null;
      const values = data.numbers[box.key];
      const value = values ? values[box.layer_box ? shown : 0] : null;
      number.textContent = formatNumber(box.kind, value);
      const where = stack ? `${stack.title}${box.layer_box ? ` layer ${shown + 1}` : ""}: ` : "";
      // the name holds the visible words in their order (WCAG 2.5.3), then what the number is
      const shownNumber = number.textContent ? ` ${number.textContent}, ${data.names[box.kind]}` : "";
      button.setAttribute("aria-label", `${where}${box.label}${shownNumber}`);
      button.title = data.meanings[box.kind] || "";
      const open = current.has(box.key) && (!box.layer_box || data.layer === null || data.layer === shown);
      if (open) button.setAttribute("aria-current", "true");
      else button.removeAttribute("aria-current");
    };
    button.addEventListener("click", () => {
      const shown = box.layer_box ? Math.min(state.layer, stack.layers - 1) : 0;
      state.send("open", { key: box.key, layer: shown });
    });
    buttons.push({ button, refresh });
    refresh();
    return button;
  };

  const top = node("div", "fm-output");
  for (const box of [...data.output].reverse()) top.append(boxButton(box, null));
  const arrow = node("div", "fm-arrow", "↑ Output probabilities");
  const stacks = node("div", "fm-stacks");
  for (const stack of data.stacks) {
    const column = node("div", `fm-column fm-${stack.stack}`);
    const above = [...stack.above].reverse().map((box) => boxButton(box, stack));
    const block = node("div", "fm-layer");
    block.append(node("span", "fm-times", `${stack.layers}×`));
    for (const box of [...stack.layer].reverse()) block.append(boxButton(box, stack));
    const below = [...stack.below].reverse().map((box) => boxButton(box, stack));
    column.append(node("div", "fm-stack-title", stack.title), ...above, block, ...below, node("div", "fm-inputs", stack.inputs));
    stacks.append(column);
  }

  const picker = node("div", "fm-picker");
  const previous = node("button", "fm-step", "‹");
  const next = node("button", "fm-step", "›");
  const shown = node("span", "fm-shown");
  shown.setAttribute("aria-live", "polite");
  previous.type = next.type = "button";
  previous.setAttribute("aria-label", "Previous layer");
  next.setAttribute("aria-label", "Next layer");
  const showLayer = () => {
    shown.textContent = `Layer ${state.layer + 1} of ${layerCount}`;
    previous.disabled = state.layer === 0;
    next.disabled = state.layer === layerCount - 1;
    for (const { refresh } of buttons) refresh();
  };
  state.refreshAll = showLayer;
  previous.addEventListener("click", () => { state.layer = Math.max(0, state.layer - 1); showLayer(); });
  next.addEventListener("click", () => { state.layer = Math.min(layerCount - 1, state.layer + 1); showLayer(); });
  picker.append(previous, shown, next);
  showLayer();

  // Arrow keys: up and down within a column (the output boxes belong to the decoder's), left and right to the
  // nearest box of the other column.
  const columnOf = (button) => buttons.map((entry) => entry.button).filter((other) => other.dataset.column === button.dataset.column);
  const onKey = (event) => {
    const button = event.target.closest(".fm-box");
    if (!button) return;
    let target = null;
    if (event.key === "ArrowUp" || event.key === "ArrowDown") {
      const column = columnOf(button);
      target = column[column.indexOf(button) + (event.key === "ArrowUp" ? -1 : 1)];
    } else if (event.key === "ArrowLeft" || event.key === "ArrowRight") {
      const other = event.key === "ArrowLeft" ? "encoder" : "decoder";
      if (button.dataset.column === other) return;
      const middle = button.getBoundingClientRect().top + button.offsetHeight / 2;
      const distance = (candidate) => Math.abs(candidate.getBoundingClientRect().top + candidate.offsetHeight / 2 - middle);
      target = buttons.map((entry) => entry.button).filter((candidate) => candidate.dataset.column === other)
        .sort((a, b) => distance(a) - distance(b))[0];
    }
    if (target) {
      target.focus();
      event.preventDefault();
    }
  };
  root.onkeydown = onKey; // a property, not a listener: a redrawn map replaces it rather than adding another
  root.style.setProperty("--fm-scale", data.scale);
  root.setAttribute("role", "group");
  root.setAttribute("aria-label", data.title);
  root.replaceChildren(node("div", "fm-title", data.title), picker, top, arrow, stacks);
  return state;
}

// The same model's map again: new numbers, the open view's box and layer, the latest trigger.
function update(state, data, setTriggerValue) {
  const openLayerChanged = data.layer !== state.data.layer;
  state.data = data;
  state.send = setTriggerValue;
  state.current = new Set(data.current);
  if (openLayerChanged && data.layer !== null) state.layer = data.layer; // the picker follows the view's layer
  state.refreshAll();
}

export default function ({ data, parentElement, setTriggerValue }) {
  const root = parentElement.querySelector(".fm-root");
  const boxes = JSON.stringify([data.title, data.scale, data.stacks, data.output]);
  if (root.figureMap && root.figureMap.boxes === boxes) update(root.figureMap, data, setTriggerValue);
  else {
    root.figureMap = draw(root, data, setTriggerValue); // its buttons' handlers read this same object
    root.figureMap.boxes = boxes;
  }
}
