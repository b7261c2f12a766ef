// Client-side tools and approvals on the voice socket (docs/voice_socket.md, "Approvals and
// client tools"). `show_link` is a tool this page runs itself: the agent calls it to put a
// link on the screen while it talks; the page answers with `tool.result`. An
// `approval.request` gets Approve / Deny buttons (the caller may also just say yes or no).

import * as alerts from "./ui/alerts.js";

export const CLIENT_TOOLS = [
  {
    name: "show_link",
    description: "Show a link (a map, a booking page, a document) on the caller's screen.",
    parameters: {
      type: "object",
      properties: {
        url: { type: "string", description: "The https URL to show." },
        title: { type: "string", description: "A short title for the link." },
      },
      required: ["url"],
    },
  },
];

function showLink(args) {
  let url;
  try {
    url = new URL(String(args.url));
  } catch {
    return { result: "not a valid URL", status: "error" };
  }
  if (url.protocol !== "https:") return { result: "only https links are shown", status: "error" };
  const box = document.getElementById("client-links") || document.getElementById("alerts");
  const a = document.createElement("a");
  a.href = url.href;
  a.textContent = String(args.title || url.href);
  a.target = "_blank";
  a.rel = "noopener noreferrer";
  const li = document.createElement("p");
  li.className = "client-link";
  li.append(a);
  box.append(li);
  return { result: `shown: ${url.href}`, status: "success" };
}

/** A `tool.call` event: run the tool here and send its `tool.result`. */
export function toolCall(ev, send, state) {
  let args = {};
  try {
    args = JSON.parse(ev.arguments || "{}");
  } catch {
    args = {};
  }
  const out = ev.name === "show_link" ? showLink(args) : { result: `unknown tool ${ev.name}`, status: "error" };
  state.clientTools.push({ name: ev.name, status: out.status });
  send({ type: "tool.result", call_id: ev.call_id, result: out.result, status: out.status });
}

/** An `approval.request` event: buttons that answer it (the caller may answer by voice). */
export function approvalRequest(ev, send, state) {
  state.approvals.push({ callId: ev.call_id, name: ev.name, prompt: ev.prompt });
  const answer = (approve) => () =>
    send({ type: "approval.response", call_id: ev.call_id, approve, reason: approve ? null : "denied on the page" });
  alerts.show({
    kind: "info",
    key: `approval-${ev.call_id}`,
    text: ev.prompt,
    actions: [
      { label: "Approve", run: answer(true) },
      { label: "Deny", run: answer(false) },
    ],
  });
}
