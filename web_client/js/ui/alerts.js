// Messages for the person at the page: errors (red) and notices (amber). An alert with a `key`
// replaces the previous one with the same key (e.g. the connection state).

const box = () => document.getElementById("alerts");

/** show({text, kind: "error"|"info", key, timeoutMs, actions: [{label, run}]}) -> dismiss() */
export function show({ text, kind = "error", key, timeoutMs = 0, actions = [] }) {
  if (key) dismiss(key);
  const div = document.createElement("div");
  div.className = `alert ${kind}`;
  if (key) div.dataset.key = key;
  const p = document.createElement("p");
  p.textContent = text;
  div.append(p);
  for (const { label, run } of actions) {
    const b = document.createElement("button");
    b.type = "button";
    b.textContent = label;
    b.addEventListener("click", () => {
      div.remove();
      run();
    });
    div.append(b);
  }
  const close = document.createElement("button");
  close.type = "button";
  close.textContent = "×";
  close.setAttribute("aria-label", "Dismiss this message");
  close.addEventListener("click", () => div.remove());
  div.append(close);
  box().append(div);
  if (timeoutMs) setTimeout(() => div.remove(), timeoutMs);
  return () => div.remove();
}

export function dismiss(key) {
  for (const node of box().querySelectorAll(".alert")) {
    if (node.dataset.key === key) node.remove();
  }
}
