// A talaria hook: before each tool call, it blocks the ones whose arguments contain a phrase from
// its list.
//
// plugin.toml's `[hook] events` says which events it gets (`pre_tool_call` here); each call runs
// in a fresh instance under a deadline. The list comes from `[plugins.{{name}}.config] block`
// (default: "rm -rf" and "DROP TABLE"). A hook can proceed, block, ask for a human's approval,
// add context or replace a result; nothing it answers can approve a command or widen a grant.
// Events are `{ tag: 'pre-tool-call', val: { session, tool, plugin, arguments, callId } }` and
// the like; a decision is `{ tag: 'proceed' }` or `{ tag: 'block', val: 'why' }`.

import { checked, config, log } from './talaria.js';

const DEFAULT_BLOCK = ['rm -rf', 'DROP TABLE'];

// `checked` makes a wrong return type fail the call naming onEvent and what it must return.
export const hooks = checked('hooks', {
  onEvent(event) {
    // An exception here (or a wrong return type) fails the call, and a failed hook fails
    // closed: talaria blocks the tool call (pre-tool-call), showing the exception with its file
    // and line; for other events it warns and goes on without this hook's answer. A hook that
    // should let calls through when it breaks must catch and return { tag: 'proceed' } itself.
    if (event.tag === 'pre-tool-call') {
      const call = event.val;
      for (const phrase of config.get('block', DEFAULT_BLOCK)) {
        if (call.arguments.toLowerCase().includes(String(phrase).toLowerCase())) {
          log.info(`blocked ${call.tool}: ${JSON.stringify(phrase)}`);
          return {
            tag: 'block',
            val: `{{name}} blocked this ${call.tool} call: its arguments contain ${JSON.stringify(phrase)}. ` +
              'Do it another way, or ask the user to change [plugins.{{name}}.config] block.',
          };
        }
      }
    }
    return { tag: 'proceed' };
  },
});
