// A page for someone whose system asks for less motion (prefers-reduced-motion: reduce): Streamlit opens and folds
// its sections with the Web Animations API (height, half a second), which CSS cannot stop, so every animation
// started on the page while the setting is on is given no duration: it ends on the next frame and tells its end as
// any animation does (Streamlit shows a section's content when the animation's "finish" event comes; ending it
// inside animate() itself would send that event before anyone listens). CSS transitions and animations are taken
// off by reduced_motion.css. Once per page: the function runs again on every run.
const REDUCE = "(prefers-reduced-motion: reduce)";

export default function () {
  if (window.attentionExplorerReducedMotion) return;
  window.attentionExplorerReducedMotion = true;
  const reduce = window.matchMedia(REDUCE);
  const animate = Element.prototype.animate;
  Element.prototype.animate = function (keyframes, options) {
    if (reduce.matches) {
      options = typeof options === "number" ? 0 : { ...options, duration: 0, delay: 0, endDelay: 0 };
    }
    return animate.call(this, keyframes, options);
  };
}
