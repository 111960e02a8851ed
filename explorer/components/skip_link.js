// "Skip to sentence": Enter (or a click) on the link puts the cursor in the sentence box. The box is looked up on
// each use: Streamlit may have replaced it since the link was drawn.
export default function ({ parentElement, data }) {
  const link = parentElement.querySelector(".skip-to-sentence");
  link.onclick = (event) => {
    event.preventDefault();
    const box = document.querySelector(data.target);
    if (box !== null) {
      box.focus();
      box.select();
    }
  };
}
