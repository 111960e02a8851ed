// Adds a "download as SVG" button beside the camera (PNG) in every plotly chart's toolbar.
// plotly's config holds one image format for its camera button; this button borrows that
// button for one click with the format set to SVG, so plotly itself writes the file (the same
// file name, every trace and font as on screen). Streamlit draws and redraws charts at any
// time, so a MutationObserver adds the button to every toolbar that lacks it.

const BUTTON_CLASS = "svg-download";
const ICON =
  '<svg viewBox="0 0 24 24" class="icon" height="1em" width="1em">' +
  '<text x="12" y="16" text-anchor="middle" font-size="9" font-weight="bold" font-family="sans-serif">SVG</text></svg>';

function downloadSvg(camera) {
  const chart = camera.closest(".js-plotly-plot");
  const options = chart._context.toImageButtonOptions; // plotly reads it when the camera is clicked
  const format = options.format;
  options.format = "svg";
  try {
    camera.click();
  } finally {
    options.format = format;
  }
}

function addButton(modebar) {
  const camera = modebar.querySelector('.modebar-btn[data-title^="Download plot"]');
  if (camera === null || modebar.querySelector(`.${BUTTON_CLASS}`) !== null) return;
  const button = document.createElement("button");
  button.type = "button";
  button.className = `modebar-btn ${BUTTON_CLASS}`;
  button.setAttribute("rel", "tooltip");
  button.setAttribute("data-title", "Download plot as an SVG (vector, for slides)");
  button.setAttribute("aria-label", "Download plot as an SVG");
  button.innerHTML = ICON; // a constant, no user text
  button.addEventListener("click", () => downloadSvg(camera));
  camera.after(button);
}

function addButtons() {
  document.querySelectorAll(".js-plotly-plot .modebar").forEach(addButton);
}

export default function () {
  addButtons();
  let pending = false;
  const observer = new MutationObserver(() => {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => {
      pending = false;
      addButtons();
    });
  });
  observer.observe(document.body, { childList: true, subtree: true });
  return () => observer.disconnect();
}
