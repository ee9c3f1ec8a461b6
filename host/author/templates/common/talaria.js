// talaria's host interfaces the JavaScript way: part of your project, written by
// `talaria plugin new`.
//
//   import { log, config, kv, secret, TalariaError } from './talaria.js';
//   log.info('starting');
//   const units = config.get('units', 'metric');        // [plugins.NAME.config], JSON-decoded
//   kv.setJson('last', { city: 'Oslo' });               // needs `kv = true`
//   const reply = await fetch('https://api.example.com/v1/now', {
//     headers: { authorization: `Bearer ${secret('API_KEY')}` },   // needs `network` and `secrets`
//   });
//
// A host call that talaria refuses, or that fails, throws a `TalariaError` whose message is
// talaria's own (it names what was missing and how to grant it). `checked(...)` around an export
// checks what its methods return, naming the method and the type it must return; `describe(e)`
// is an exception with the file and line it was thrown at. The template's exports pass it
// on to the host as the call's error. HTTP is the platform's own `fetch()`. Nothing here is
// needed: the raw imports are the `talaria:plugin/...@0.2.0` modules listed in wit/.

import { log as hostLog } from 'talaria:plugin/log@0.2.0';
import { get as configGet } from 'talaria:plugin/config@0.2.0';
import * as hostKv from 'talaria:plugin/kv@0.2.0';
import { exists } from 'talaria:plugin/secrets@0.2.0';
import { run as hostRun } from 'talaria:plugin/process@0.2.0';
import { complete as hostComplete } from 'talaria:plugin/llm@0.2.0';

/** A host call talaria refused, or that failed; `message` is talaria's, with the fix. */
export class TalariaError extends Error {
  constructor(message) {
    super(message);
    this.name = 'TalariaError';
  }
}

/** The text of a host error: a string, or a variant `{ tag, val }` carrying one. */
function messageOf(e) {
  const value = e?.payload ?? e;
  if (typeof value === 'string') return value;
  if (value?.val !== undefined) return String(value.val);
  if (value?.tag !== undefined) return value.tag;
  return String(value?.message ?? value);
}

function host(f, ...args) {
  try {
    return f(...args);
  } catch (e) {
    throw new TalariaError(messageOf(e));
  }
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();
const bytes = (value) => (typeof value === 'string' ? encoder.encode(value) : value);

/** Lines in talaria's log, tagged with the plugin's name (`talaria -v` shows info). */
export const log = {
  debug: (message) => hostLog('debug', String(message)),
  info: (message) => hostLog('info', String(message)),
  warn: (message) => hostLog('warn', String(message)),
  error: (message) => hostLog('error', String(message)),
};

/** The operator's `[plugins.NAME.config]` table in config.toml (no capability needed). */
export const config = {
  get(key, fallback = undefined) {
    const raw = configGet(key);
    return raw === undefined ? fallback : JSON.parse(raw);
  },
};

/**
 * Private persistent storage (`kv = true`): bytes under string keys, with typed helpers.
 * Several talaria processes may run the plugin at once: count with `increment`, create one key
 * per item with `create`, and change a shared value with `compareAndSet`.
 */
export const kv = {
  get: (key) => host(hostKv.get, key),
  getText(key, fallback = undefined) {
    const value = kv.get(key);
    return value === undefined ? fallback : decoder.decode(value);
  },
  getJson(key, fallback = undefined) {
    const value = kv.get(key);
    return value === undefined ? fallback : JSON.parse(decoder.decode(value));
  },
  set: (key, value) => host(hostKv.set, key, bytes(value)),
  setJson: (key, value) => host(hostKv.set, key, encoder.encode(JSON.stringify(value))),
  /** Set `key` only if nobody has: false when it existed. */
  create: (key, value) => host(hostKv.compareAndSet, key, undefined, bytes(value)),
  compareAndSet: (key, expected, value) =>
    host(hostKv.compareAndSet, key, expected === undefined ? undefined : bytes(expected), value === undefined ? undefined : bytes(value)),
  /** The counter's new value, as a Number. */
  increment: (key, delta = 1) => Number(host(hostKv.increment, key, BigInt(delta))),
  delete: (key) => host(hostKv.delete, key),
  keys: (prefix = '') => host(hostKv.listKeys, prefix),
  /** `[[key, text], ...]`, sorted by key. */
  items: (prefix = '') => host(hostKv.listWithValues, prefix).map(([k, v]) => [k, decoder.decode(v)]),
  /** `[[key, value], ...]`, sorted by key, each value JSON-decoded. */
  itemsJson: (prefix = '') => kv.items(prefix).map(([k, v]) => [k, JSON.parse(v)]),
};

/**
 * The placeholder for secret `name`: put it in a request header; talaria fills it in only on
 * requests to the host it was granted for, and the plugin never sees the value.
 */
export function secret(name) {
  return `{{secret:${name}}}`;
}

/** Whether secret `name` is granted to this plugin and has a value. */
export function hasSecret(name) {
  return exists(name);
}

/** Run a shell command in the workspace (`process = true`): `{ exitCode, stdout, stderr, ... }`. */
export function run(command, { cwd, timeoutMs } = {}) {
  return host(hostRun, { command, cwd, timeoutMs });
}

/** Ask the operator's auxiliary model (`llm = true`); returns its answer. */
export function complete(prompt, { purpose = 'plugin', system, maxTokens } = {}) {
  const messages = system === undefined ? [] : [{ role: 'system', content: system }];
  messages.push({ role: 'user', content: prompt });
  return host(hostComplete, { purpose, messages, maxTokens }).text;
}

/**
 * What a failure thrown by the plugin's code becomes for the host: a `TalariaError` or any
 * other exception becomes `{ tag: 'failed', val: message }`; a WIT error value passes as it is.
 */
export function failure(e) {
  if (e?.tag !== undefined) return e;
  if (e instanceof TalariaError) return { tag: 'failed', val: e.message };
  return { tag: 'failed', val: describe(e) };
}

/**
 * An exception as one line, with where in your code it was thrown:
 * `TypeError: x is undefined (at weather@app.js:12:5)`.
 */
export function describe(e) {
  const name = e?.name && e.name !== 'Error' ? `${e.name}: ` : '';
  const text = `${name}${e?.message ?? String(e)}`;
  // StarlingMonkey's frames read `function@file:line:column`; the first in your own files.
  const frames = String(e?.stack ?? '').split('\n').map((f) => f.trim()).filter(Boolean);
  const mine = frames.find((f) => !f.includes('talaria.js') && !f.includes('initializer.js'));
  return mine ? `${text} (at ${mine})` : text;
}

const isString = (v) => typeof v === 'string';
const typeOf = (v) => (v === null ? 'null' : Array.isArray(v) ? 'an array' : typeof v === 'object' ? 'an object' : `a ${typeof v}`);
const shown = (v) => {
  let text;
  try {
    text = JSON.stringify(v);
  } catch {
    text = String(v);
  }
  text = text === undefined ? String(v) : text;
  return text.length > 60 ? `${text.slice(0, 57)}...` : text;
};

/** Checks of what exports return: the type in JavaScript's terms, and why a value is not one. */
const DECISION_TAGS = ['proceed', 'block', 'require-approval', 'add-context', 'replace-result'];
const RETURNS = {
  'hooks.onEvent': [
    "a decision: { tag: 'proceed' }, or { tag: 'block' | 'require-approval' | 'add-context' | 'replace-result', val: 'text' }",
    (v) => {
      if (v === null || typeof v !== 'object' || !DECISION_TAGS.includes(v.tag)) return `it returned ${typeOf(v)} ${shown(v)}`;
      if (v.tag !== 'proceed' && !isString(v.val)) return `its val is ${typeOf(v.val)} ${shown(v.val)}, not a string`;
      return null;
    },
  ],
  'tools.list': [
    'an array of { name, description, parameters } whose values are strings (parameters: JSON.stringify(schema))',
    (v) => {
      if (!Array.isArray(v)) return `it returned ${typeOf(v)} ${shown(v)}`;
      for (const [i, spec] of v.entries()) {
        if (spec === null || typeof spec !== 'object') return `[${i}] is ${typeOf(spec)} ${shown(spec)}`;
        for (const key of ['name', 'description', 'parameters']) {
          if (!isString(spec[key])) {
            const hint = key === 'parameters' && typeof spec[key] === 'object' ? ' (use JSON.stringify)' : '';
            return `[${i}].${key} is ${typeOf(spec[key])} ${shown(spec[key])}, not a string${hint}`;
          }
        }
      }
      return null;
    },
  ],
  'tools.call': ['a string (use JSON.stringify for data)', (v) => (isString(v) ? null : `it returned ${typeOf(v)} ${shown(v)}`)],
};

/**
 * Check what the methods of an export (`export const hooks = checked('hooks', { ... })`) return:
 * a wrong type throws a TypeError naming the method and what it must return, instead of an
 * error from the bindings. An `async` method's result is checked when it settles.
 */
export function checked(name, object) {
  for (const [method, run] of Object.entries(object)) {
    const check = RETURNS[`${name}.${method}`];
    if (typeof run !== 'function' || check === undefined) continue;
    const [expected, why] = check;
    const verify = (value) => {
      const wrong = why(value);
      if (wrong !== null) throw new TypeError(`${name}.${method} must return ${expected}, but ${wrong}`);
      return value;
    };
    object[method] = function (...args) {
      const out = run.apply(this, args);
      return out instanceof Promise ? out.then(verify) : verify(out);
    };
  }
  return object;
}
