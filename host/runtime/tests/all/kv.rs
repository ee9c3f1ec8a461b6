//! The kv operations several writers need, through a real component (the evil plugin, built with
//! talaria-sdk): `compare-and-set`, `increment` and `list-with-values` act on the plugin's own
//! space, need the kv grant, and keep the store's limits with the same errors; two runtimes on
//! one home (two processes, in effect) never get the same counter value; and a component that
//! imports only some of the kv functions still loads.

use serde_json::json;
use talaria_store::Store;
use talaria_test_support as support;

use crate::{Env, call, failed, ok};

/// The evil plugin's kv space as a user plugin.
const SPACE: &str = "user/evil@local";

fn store(env: &Env) -> Store {
    Store::open(&env.home.path().join("state.db")).expect("store")
}

#[tokio::test]
async fn compare_and_set_increment_and_list_work_in_the_plugins_own_space() {
    let env = Env::new();
    env.evil("evil", "kv = true", &["kv"]);
    store(&env).kv_set("user/other@local", "e/1", b"another plugin's").await.expect("set");
    let rt = env.runtime();
    let swap =
        |key: &str, expected: Option<&str>, new: Option<&str>| json!({ "key": key, "expected": expected, "new": new });
    assert_eq!(ok(call(&rt, "kv_swap", swap("e/1", None, Some("one"))).await), "swapped");
    assert_eq!(ok(call(&rt, "kv_swap", swap("e/1", None, Some("uno"))).await), "unchanged", "exists now");
    assert_eq!(ok(call(&rt, "kv_swap", swap("e/1", Some("zero"), Some("two"))).await), "unchanged");
    assert_eq!(ok(call(&rt, "kv_swap", swap("e/1", Some("one"), Some("two"))).await), "swapped");
    assert_eq!(ok(call(&rt, "kv_swap", swap("e/2", None, Some("three"))).await), "swapped");
    assert_eq!(ok(call(&rt, "kv_list", json!({ "prefix": "e/" })).await), "e/1=two\ne/2=three\n");
    assert_eq!(ok(call(&rt, "kv_swap", swap("e/2", Some("three"), None)).await), "swapped", "deletes");
    assert_eq!(ok(call(&rt, "kv_list", json!({ "prefix": "e/" })).await), "e/1=two\n");

    assert_eq!(ok(call(&rt, "kv_count", json!({ "key": "next", "delta": 1 })).await), "1");
    assert_eq!(ok(call(&rt, "kv_count", json!({ "key": "next", "delta": 41 })).await), "42");
    assert_eq!(ok(call(&rt, "kv_get", json!({ "name": "next" })).await), "42", "decimal text");

    // In the store, under the plugin's identity; the other plugin's key is untouched.
    let s = store(&env);
    assert_eq!(s.kv_get(SPACE, "e/1").await.expect("get"), Some(b"two".to_vec()));
    assert_eq!(s.kv_get(SPACE, "next").await.expect("get"), Some(b"42".to_vec()));
    assert_eq!(s.kv_get("user/other@local", "e/1").await.expect("get"), Some(b"another plugin's".to_vec()));
}

#[tokio::test]
async fn the_new_operations_need_the_kv_grant() {
    let env = Env::new();
    env.evil("evil", "kv = true", &[]);
    let rt = env.runtime();
    let refusal = "kv: the kv capability is not granted to plugin 'evil' (request `kv = true` in plugin.toml and grant it: `talaria plugins grant evil kv`)";
    assert_eq!(failed(call(&rt, "kv_swap", json!({ "key": "k", "new": "v" })).await), refusal);
    assert_eq!(failed(call(&rt, "kv_count", json!({ "key": "k", "delta": 1 })).await), refusal);
    assert_eq!(failed(call(&rt, "kv_list", json!({ "prefix": "" })).await), refusal);
    assert_eq!(store(&env).kv_usage(SPACE).await.expect("usage"), (0, 0));
}

#[tokio::test]
async fn the_new_writes_keep_the_stores_limits_and_say_which() {
    let env = Env::new();
    env.evil("evil", "kv = true", &["kv"]);
    let rt = env.runtime();
    let mib = talaria_store::MAX_VALUE_BYTES as u64;
    let e = failed(call(&rt, "kv_fill", json!({ "key": "big", "bytes": mib + 1 })).await);
    assert_eq!(e, format!("kv: value of {} bytes is larger than the {mib}-byte limit", mib + 1));
    let long = "k".repeat(talaria_store::MAX_KEY_BYTES + 1);
    let e = failed(call(&rt, "kv_count", json!({ "key": long, "delta": 1 })).await);
    assert_eq!(e, "kv: key is empty or longer than 512 bytes");
    ok(call(&rt, "kv_set", json!({ "text": "word=ten" })).await);
    let e = failed(call(&rt, "kv_count", json!({ "key": "word", "delta": 1 })).await);
    assert_eq!(
        e,
        "kv: the value under \"word\" is not a counter (a counter is a whole number in decimal ASCII, like `42` or `-7`); delete the key or count under another one"
    );
    // Ten values of 1 MiB do not fit in the 10 MiB quota with their keys.
    for i in 0..9 {
        assert_eq!(ok(call(&rt, "kv_fill", json!({ "key": format!("f{i}"), "bytes": mib })).await), "created");
    }
    let e = failed(call(&rt, "kv_fill", json!({ "key": "f9", "bytes": mib })).await);
    assert_eq!(e, format!("kv: plugin storage quota of {} bytes would be exceeded", talaria_store::MAX_PLUGIN_BYTES));
    assert_eq!(store(&env).kv_get(SPACE, "f9").await.expect("get"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_runtimes_on_one_home_never_get_the_same_counter_value() {
    let env = Env::new();
    env.evil("evil", "kv = true", &["kv"]);
    let (a, b) = (env.runtime(), env.runtime());
    let count = |rt: talaria_runtime::Runtime| async move {
        let mut got = Vec::new();
        for _ in 0..40 {
            got.push(ok(call(&rt, "kv_count", json!({ "key": "id", "delta": 1 })).await).parse::<i64>().expect("n"));
        }
        got
    };
    let (from_a, from_b) = tokio::join!(tokio::spawn(count(a)), tokio::spawn(count(b)));
    let mut all: Vec<i64> = from_a.expect("a").into_iter().chain(from_b.expect("b")).collect();
    all.sort_unstable();
    assert_eq!(all, (1..=80).collect::<Vec<i64>>());
}

/// The function names a component imports from `talaria:plugin/kv@0.2.0`, sorted.
fn kv_imports(wasm: &str) -> Vec<String> {
    let mut config = wasmtime::Config::new();
    config.wasm_component_model(true);
    let engine = wasmtime::Engine::new(&config).expect("engine");
    let component = wasmtime::component::Component::from_file(&engine, wasm).expect("component");
    let ty = component.component_type();
    let (_, kv) = ty.imports(&engine).find(|(name, _)| *name == "talaria:plugin/kv@0.2.0").expect("imports kv");
    let wasmtime::component::types::ComponentItem::ComponentInstance(kv) = kv.ty else { panic!("kv is an instance") };
    let mut names: Vec<String> = kv.exports(&engine).map(|(name, _)| name.to_string()).collect();
    names.sort();
    names
}

#[tokio::test]
async fn a_component_importing_only_the_first_kv_functions_still_loads() {
    // The probe memory provider calls only get, set and list-keys: its component imports those
    // alone, as one built before the other functions existed does.
    assert_eq!(kv_imports(support::PROBE_MEMORY_WASM), ["get", "list-keys", "set"]);
    let env = Env::new();
    env.install_v2("probe", support::PROBE_MEMORY_WASM, &["memory"], "[capabilities]\nkv = true");
    env.grant("probe", &["kv"]);
    let rt = env.runtime();
    let plugin = rt.plugin("probe").expect("loaded").clone();
    rt.memory_sync_turn(&plugin, "hi", "hello", &env.session()).await.expect("sync");
    assert_eq!(rt.memory_prompt_block(&plugin, &env.session()).await, Ok("memory for s1: 1 turns".into()));
    // One that calls the new functions imports them too.
    let evil = kv_imports(support::EVIL_WASM);
    for f in ["compare-and-set", "increment", "list-with-values"] {
        assert!(evil.contains(&f.to_string()), "{evil:?}");
    }
}
