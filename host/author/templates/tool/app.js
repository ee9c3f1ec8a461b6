// A talaria tool plugin with one tool, `hello`.
//
// The host calls `tools.list` once to learn the tools, then `tools.call` each time the model uses
// one, in a fresh instance. `talaria.js`, beside this file, wraps the host's interfaces (log,
// config, kv, secrets, ...); a host call talaria refuses throws a `TalariaError` with talaria's
// message. HTTP is `fetch()` (with `network` requested in plugin.toml).

import { checked, failure, log } from './talaria.js';

// Each tool: what it does (for the model), the JSON Schema of its arguments, and the function.
const TOOLS = {
  hello: {
    description: 'Greet someone by name. Returns the greeting.',
    parameters: {
      type: 'object',
      properties: { name: { type: 'string', description: 'Who to greet.' } },
      required: ['name'],
    },
    run(args, context) {
      const name = String(args.name ?? '').trim();
      if (name === '') {
        // The caller's mistake: `invalid-args` tells the model to fix its arguments.
        throw toolError('invalid-args', '`name` must not be empty: say who to greet');
      }
      // A host call: this line goes to talaria's log (`talaria -v` shows it).
      log.info(`greeting ${name}`);
      return `Hello, ${name}!`;
    },
  },
};

/** A `tool-error` from wit/plugin.wit: `invalid-args`, `unknown-tool` or `failed`. */
function toolError(tag, message) {
  return { tag, val: message };
}

// `checked` makes a wrong return type fail the call naming the method and what it must return.
export const tools = checked('tools', {
  list() {
    return Object.entries(TOOLS).map(([name, tool]) => ({
      name,
      description: tool.description,
      parameters: JSON.stringify(tool.parameters),
    }));
  },

  // `context` is { sessionId, callId, workspace }. A tool's `run` may be `async` (to await fetch()).
  call(name, argsJson, context) {
    const tool = TOOLS[name];
    if (tool === undefined) {
      throw toolError('unknown-tool', name);
    }
    try {
      return text(name, tool.run(JSON.parse(argsJson), context));
    } catch (e) {
      throw failure(e);
    }
  },
});

/** A tool's result must be a string: anything else would crash the call with no message. */
function text(name, out) {
  if (typeof out === 'string') {
    return out;
  }
  if (out instanceof Promise) {
    return out.then((done) => text(name, done), (e) => { throw failure(e); });
  }
  const got = out === null ? 'null' : Array.isArray(out) ? 'array' : typeof out;
  throw toolError('failed', `tool \`${name}\` must return a string; got ${got} (use JSON.stringify for data)`);
}
