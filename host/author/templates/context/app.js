// A talaria context engine: when the prompt nears the model's context window, it keeps the last
// messages and replaces the rest with a short note of what was dropped.
//
// One engine is active at a time (`[context] engine = "{{name}}"` in config.toml). Settings come
// from `[plugins.{{name}}.config]`: `threshold` (the share of the context window that triggers
// it, default 0.75) and `keep` (messages kept, default 8). `talaria.js`, beside this file, wraps
// the host's interfaces. Token counts (u64 in WIT) arrive as BigInt.
//
// The history it returns must be a valid conversation: it starts with a user message, roles
// alternate properly, and every tool call is followed by its results. The host checks, and keeps
// the old history when it is not.

import { TalariaError, config, describe, log } from './talaria.js';

function settings() {
  return { threshold: Number(config.get('threshold', 0.75)), keep: Math.max(2, Number(config.get('keep', 8))) };
}

/** Where the kept part starts: a user message, so the history stays valid (0: keep it all). */
function cut(messages, keep) {
  const start = Math.max(0, messages.length - keep);
  for (let i = start; i < messages.length; i++) {
    if (messages[i].role === 'user') return i;
  }
  for (let i = start - 1; i >= 0; i--) {
    if (messages[i].role === 'user') return i;
  }
  return 0;
}

export const context = {
  shouldCompress(status, session) {
    const { threshold } = settings();
    const length = Number(status.contextLength);
    return length > 0 && Number(status.promptTokens) >= threshold * length;
  },

  compress(request) {
    try {
      const { keep } = settings();
      const messages = request.messages;
      const start = cut(messages, keep);
      if (start === 0) {
        return { messages, note: 'nothing to compress: the history is already short' };
      }
      const first = messages.find((m) => m.role === 'user')?.content ?? '';
      const note = [`[${start} earlier messages were removed to save room. The conversation began with: ${JSON.stringify(first.slice(0, 300))}]`];
      if (request.focus) note.push(`[Focus from now on: ${request.focus}]`);
      if (request.memoryContext) note.push(`[Memory notes on what was removed: ${request.memoryContext}]`);
      if (request.carry) note.push(request.carry);
      const kept = messages.slice(start);
      kept[0] = { ...kept[0], content: `${note.join('\n')}\n\n${kept[0].content}` };
      log.info(`dropped ${start} messages, kept ${kept.length}`);
      return { messages: kept, note: `dropped ${start} earlier messages, kept the last ${kept.length}` };
    } catch (e) {
      // The error is a string: the host keeps the old history and says why.
      throw e instanceof TalariaError ? e.message : describe(e); // with where it was thrown
    }
  },

  report(status, session) {
    const { threshold, keep } = settings();
    return [
      ['threshold', `${Math.round(threshold * 100)}% of the context window`],
      ['keeps', `the last ${keep} messages`],
    ];
  },
};
