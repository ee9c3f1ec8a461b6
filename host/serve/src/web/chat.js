// talaria serve's live chat: the chat's events (server-sent) drawn as they come, and its forms
// sent without leaving the page. Every text is put in with textContent: what the model, a tool
// or a file wrote is shown, never run.
"use strict";
(function () {
  const log = document.getElementById("log");
  if (!log) return;
  const chat = log.dataset.chat;
  const csrf = log.dataset.csrf;
  const status = document.getElementById("status");
  const form = document.getElementById("send");
  const input = document.getElementById("text");
  const stopButton = document.getElementById("stop");
  let answer = null; // the assistant's article of the turn under way
  let text = null; // the text being streamed into it
  const tools = new Map();
  const approvals = new Map();
  let deltas = 0;

  function el(tag, className, content) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (content !== undefined) node.textContent = content;
    return node;
  }

  function post(action, fields) {
    const body = new URLSearchParams(Object.assign({ csrf: csrf }, fields));
    return fetch("/chat/" + chat + "/" + action, {
      method: "POST",
      headers: { Accept: "application/json" },
      body: body,
    }).then(function (r) {
      if (!r.ok) status.textContent = "Refused (" + r.status + ").";
      return r;
    });
  }

  function assistant() {
    if (!answer) {
      answer = el("article", "assistant");
      answer.appendChild(el("h2", "", "Assistant"));
      log.appendChild(answer);
    }
    return answer;
  }

  function approval(e) {
    const box = el("article", "approval");
    box.dataset.approval = e.id;
    box.appendChild(el("h2", "", "Approval needed"));
    const what = el("p", "");
    what.append("Plugin '" + e.plugin + "' wants to " + e.what + " ");
    what.appendChild(el("code", "", e.command));
    box.appendChild(what);
    box.appendChild(el("p", "hint", e.reason));
    const buttons = el("div", "buttons");
    [["once", "Allow once"], ["session", "Allow for this session"], ["always", "Always allow"], ["deny", "Deny"]].forEach(
      function (choice) {
        const b = el("button", "", choice[1]);
        b.type = "button";
        b.dataset.decision = choice[0];
        b.addEventListener("click", function () {
          buttons.querySelectorAll("button").forEach(function (x) { x.disabled = true; });
          post("approve", { approval: e.id, decision: choice[0] });
        });
        buttons.appendChild(b);
      },
    );
    box.appendChild(buttons);
    assistant().appendChild(box);
    approvals.set(e.id, box);
  }

  function question(e) {
    const box = el("form", "question");
    box.appendChild(el("p", "", e.question));
    const field = el("input");
    field.name = "answer";
    field.required = true;
    (e.choices || []).forEach(function (c) {
      const b = el("button", "", c);
      b.type = "button";
      b.addEventListener("click", function () { field.value = c; });
      box.appendChild(b);
    });
    box.appendChild(field);
    box.appendChild(el("button", "", "Answer"));
    box.addEventListener("submit", function (ev) {
      ev.preventDefault();
      post("answer", { question: e.id, text: field.value });
      box.replaceWith(el("p", "hint", "You answered: " + field.value));
    });
    assistant().appendChild(box);
  }

  function handle(e) {
    switch (e.kind) {
      case "turn": {
        const mine = el("article", "user");
        mine.appendChild(el("h2", "", "User"));
        mine.appendChild(el("div", "text", e.text));
        log.appendChild(mine);
        answer = null;
        text = null;
        status.textContent = "Working…";
        break;
      }
      case "text":
        if (!text) {
          text = el("div", "text");
          assistant().appendChild(text);
        }
        text.textContent += e.text;
        deltas += 1;
        log.dataset.deltas = deltas;
        break;
      case "message_end":
        text = null;
        break;
      case "tool": {
        const call = el("details", "call");
        call.open = true;
        const summary = el("summary", "", "Tool call: ");
        summary.appendChild(el("code", "", e.name));
        call.appendChild(summary);
        call.appendChild(el("p", "hint", e.preview));
        assistant().appendChild(call);
        tools.set(e.id, call);
        text = null;
        break;
      }
      case "tool_done": {
        const call = tools.get(e.id);
        if (call) call.appendChild(el("pre", e.ok ? "ok" : "failed", e.preview));
        break;
      }
      case "approval":
        approval(e);
        status.textContent = "Waiting for your approval.";
        break;
      case "approval_done": {
        const box = approvals.get(e.id);
        if (box) {
          const buttons = box.querySelector(".buttons");
          if (buttons) buttons.replaceWith(el("p", "decision", e.decision === "deny" ? "Denied." : "Allowed (" + e.decision + ")."));
        }
        status.textContent = "Working…";
        break;
      }
      case "question":
        question(e);
        status.textContent = "The agent asks you a question.";
        break;
      case "notice":
        assistant().appendChild(el("p", "hint", e.text));
        break;
      case "error":
        log.appendChild(el("p", "refused", e.text));
        break;
      case "turn_end":
        status.textContent =
          e.outcome === "completed" ? "Done." : e.outcome === "failed" ? "Failed: " + e.detail : "Ended (" + e.outcome + ").";
        log.dataset.turns = String(Number(log.dataset.turns || "0") + 1);
        answer = null;
        text = null;
        break;
      case "lagged":
        status.textContent = "Some events were missed: reload the page.";
        break;
    }
  }

  const events = new EventSource("/chat/" + chat + "/events");
  events.onmessage = function (m) { handle(JSON.parse(m.data)); };
  events.onopen = function () { log.dataset.live = "yes"; };

  form.addEventListener("submit", function (ev) {
    ev.preventDefault();
    if (ev.submitter === stopButton) {
      post("stop", {});
      return;
    }
    const said = input.value;
    if (!said.trim()) return;
    input.value = "";
    post("send", { text: said });
  });
})();
