// A talaria memory provider: it keeps each finished turn and recalls the earlier ones that share
// words with the user's new message.
//
// One provider is active at a time (`[memory] provider = "{{name}}"` in config.toml). The host
// keeps one instance alive across calls, but anything that must outlive it goes in kv.
// `talaria.js`, beside this file, wraps the host's interfaces; a host call talaria refuses throws
// a `TalariaError`, which `failing` below hands to the host as the call's error.

import { TalariaError, describe, kv, log } from './talaria.js';

// Words too common to say two messages are about the same thing.
const COMMON = new Set('the and for are but not you your with this that what have was were from they them about into'.split(' '));
// At most this many earlier turns are recalled for one message.
const RECALLED = 3;

function words(text) {
  return new Set((text.toLowerCase().match(/[a-z0-9']+/g) ?? []).filter((w) => w.length > 2 && !COMMON.has(w)));
}

/** Hand any exception to the host as the call's error (a string), never a crash. */
function failing(f) {
  return (...args) => {
    try {
      return f(...args);
    } catch (e) {
      throw e instanceof TalariaError ? e.message : describe(e); // with where it was thrown
    }
  };
}

export const memory = {
  systemPromptBlock: failing((session) => ''),

  prefetch: failing((query, session) => {
    const wanted = words(query);
    if (wanted.size === 0) return '';
    const scored = [];
    for (const [key, turn] of kv.itemsJson('turn/')) {
      const said = words(`${turn.user} ${turn.assistant}`);
      const shared = [...wanted].filter((w) => said.has(w)).length;
      if (shared > 0) scored.push({ shared, key, turn });
    }
    scored.sort((a, b) => b.shared - a.shared || a.key.localeCompare(b.key));
    if (scored.length === 0) return '';
    const lines = scored
      .slice(0, RECALLED)
      .map(({ turn }) => `- the user said: ${turn.user} (you answered: ${turn.assistant.slice(0, 200)})`);
    log.debug(`recalled ${lines.length} turns`);
    return `From earlier conversations:\n${lines.join('\n')}`;
  }),

  syncTurn: failing((user, assistant, session) => {
    // One key per turn, numbered by an atomic counter: two talaria processes never collide.
    const n = kv.increment('turns');
    kv.setJson(`turn/${String(n).padStart(12, '0')}`, { user, assistant, session: session.sessionId });
  }),

  onPreCompress: failing((messages, session) => ''),
  onSessionEnd: failing((messages, session) => {}),
  onMemoryWrite: failing((action, target, content, session) => {}),
};

/** A memory provider may offer tools too; this one offers none. */
export const tools = {
  list() {
    return [];
  },
  call(name, argsJson, context) {
    throw { tag: 'unknown-tool', val: name };
  },
};
