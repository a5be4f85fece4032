(function () {
  // Re-fetch this page every few seconds and swap in its <main id="board">: no flicker, the
  // scroll position stays, and when the gateway is unreachable the last figures stay on screen.
  var live = document.getElementById("live");
  var text = document.getElementById("live-text");
  var every = Number(live.getAttribute("data-every")) * 1000 || 3000;
  var refreshes = 0;
  function mark(ok, message) {
    live.className = ok ? "live" : "live stale";
    text.textContent = message;
  }
  function tick() {
    fetch(location.pathname, { cache: "no-store", credentials: "same-origin" })
      .then(function (response) {
        if (response.status === 401 || response.status === 403) throw new Error("sign in again: open /dashboard?key=…");
        if (!response.ok) throw new Error("gateway answered " + response.status);
        return response.text();
      })
      .then(function (html) {
        var next = new DOMParser().parseFromString(html, "text/html").getElementById("board");
        if (!next) throw new Error("unexpected answer");
        document.getElementById("board").replaceWith(document.adoptNode(next));
        live.setAttribute("data-refreshes", String(++refreshes));
        mark(true, "live · every " + every / 1000 + " s");
      })
      .catch(function (error) {
        var why = error instanceof TypeError ? "gateway unreachable" : error.message;
        mark(false, "not updating: " + why + "; retrying");
      })
      .then(function () { setTimeout(tick, every); });
  }
  setTimeout(tick, every);
})();
