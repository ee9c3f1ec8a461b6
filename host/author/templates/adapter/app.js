// A talaria platform adapter (API 0.3.0).
//
// The host keeps one instance per configured account and drives it: `connect` once, `poll` in a
// loop when the account polls, `handleWebhook` for requests to the account's routes, `send` and
// `edit` for replies. This one serves a webhook route: each POSTed JSON message goes to the agent,
// and the reply goes back in the HTTP response. A function whose WIT result is an error throws
// `{ tag: 'permanent' | 'transient', val }` instead of returning it. Exports may be `async`
// (to await fetch() to the platform's API).

// `talaria.js`, beside this file, wraps the host's interfaces (log, config, kv, secrets, ...).
import { log } from './talaria.js';

const encoder = new TextEncoder();
const decoder = new TextDecoder();

function jsonResponse(status, body) {
  return { status, headers: [['content-type', 'application/json']], body: encoder.encode(JSON.stringify(body)) };
}

export const adapter = {
  connect() {
    // A real platform: log in here (its token in a header as "Bearer {{secret:PLATFORM_TOKEN}}").
    return {
      botId: '{{name}}',
      botName: '{{name}}',
      format: 'plain',
      maxLength: 4000,
      canEdit: false,
      editIntervalMs: 1000,
      buttons: false,
      polls: false,
    };
  },

  poll(timeoutMs) {
    // A polling platform: wait up to `timeoutMs` for its new messages and return them.
    return [];
  },

  handleWebhook(request) {
    let posted;
    try {
      posted = JSON.parse(decoder.decode(request.body));
    } catch (e) {
      return { response: jsonResponse(400, { error: `expected {"chat", "user", "text"}: ${e}` }), events: [] };
    }
    log.info(`a message from ${posted.user} in ${posted.chat}`);
    const message = {
      id: String(posted.id ?? `${posted.chat}-${request.body.length}`),
      chatId: String(posted.chat),
      chatType: 'dm',
      chatName: '',
      threadId: undefined,
      senderId: String(posted.user),
      senderName: String(posted.name ?? ''),
      text: String(posted.text ?? ''),
      mentionsBot: true,
      replyTo: undefined,
      attachments: [],
    };
    // No response: the host answers the request with the agent's reply.
    return { response: undefined, events: [{ tag: 'message', val: message }] };
  },

  send(message) {
    // A real platform: post the message to its API and return the new message's id.
    throw { tag: 'permanent', val: 'this adapter answers in the HTTP response only' };
  },

  edit(messageId, message) {
    throw { tag: 'permanent', val: 'this adapter cannot edit messages' };
  },

  typing(chatId, threadId) {},

  chatInfo(chatId) {
    return { id: chatId, name: chatId, chatType: 'dm' };
  },
};
