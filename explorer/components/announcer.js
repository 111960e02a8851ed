// A polite live region per name (the translation, the quiz), kept outside Streamlit's elements so that reruns
// never replace it: a screen reader speaks its text when the text changes, and only then.
function region(name) {
  const id = `attention-explorer-announcer-${name}`;
  let node = document.getElementById(id);
  if (node === null) {
    node = document.createElement("div");
    node.id = id;
    node.setAttribute("role", "status");
    node.setAttribute("aria-live", "polite");
    node.setAttribute("aria-atomic", "true");
    // visually hidden, still read: the page shows the same text in its own place
    node.style.cssText =
      "position:absolute;width:1px;height:1px;margin:-1px;padding:0;overflow:hidden;clip:rect(0,0,0,0);border:0;";
    document.body.appendChild(node);
  }
  return node;
}

export default function ({ data }) {
  const node = region(data.name);
  if (node.textContent !== data.text) node.textContent = data.text;
}
