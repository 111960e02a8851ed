// A page for someone whose system asks for less motion (prefers-reduced-motion: reduce): Streamlit opens and folds
// its sections with the Web Animations API (height, half a second), which CSS cannot stop, so every animation
// started on the page is sent to its end at once while the setting is on (one without end is stopped). CSS
// transitions and animations are taken off by reduced_motion.css. Once per page: the function runs again on every run.
const REDUCE = "(prefers-reduced-motion: reduce)";

export default function () {
  if (window.attentionExplorerReducedMotion) return;
  window.attentionExplorerReducedMotion = true;
  const reduce = window.matchMedia(REDUCE);
  const animate = Element.prototype.animate;
  Element.prototype.animate = function (keyframes, options) {
    const animation = animate.call(this, keyframes, options);
    if (reduce.matches) {
      try {
        animation.finish();
      } catch (endless) {
        animation.cancel(); // an animation without end cannot finish (InvalidStateError): it stops instead
      }
    }
    return animation;
  };
}
