// When the page's connection to the server is lost and made again (the server restarted, or its replica died and
// nginx sent the page to another), the server holds a new, empty session for the page. Streamlit does not run it
// by itself when the page's last run was a whole-page run with fragments in it, and a fragment's button (the step
// buttons) then does nothing: the new session has never heard of the fragment. On every reconnection this asks for
// one whole-page run, which rebuilds the page from its URL (explorer.state.read_url).
const STREAM = "/_stcore/stream";
const SETTLE_MS = 500; // Streamlit's own handshake on the new connection comes first

let askForRun = null; // the latest render's setTriggerValue
let pendingRun = null; // the run asked for by the latest reconnection, not yet sent

function watchReconnections() {
  if (window.attentionExplorerWatchesReconnections) return;
  window.attentionExplorerWatchesReconnections = true;
  // Streamlit made its first connection before any component ran: every one made from now on is a reconnection.
  window.WebSocket = new Proxy(window.WebSocket, {
    construct(target, args) {
      const socket = Reflect.construct(target, args);
      if (String(args[0]).includes(STREAM)) {
        // one run for a burst of reconnections (a replica dying may take several tries): each run asked for
        // would replace the one before it, and with it a fragment's run the page asked for meanwhile
        socket.addEventListener("open", () => {
          clearTimeout(pendingRun);
          pendingRun = setTimeout(() => askForRun && askForRun("reconnected", Date.now()), SETTLE_MS);
        });
      }
      return socket;
    },
  });
}

export default function ({ data, setTriggerValue }) {
  askForRun = setTriggerValue;
  // which server session drew the page last: a new one after a reconnection's run (the browser tests wait for it)
  document.documentElement.dataset.explorerSession = data.session;
  watchReconnections();
}
