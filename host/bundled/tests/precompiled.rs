//! The bundled plugins are compiled at build time: a fresh home loads them without compiling
//! or writing anything to the compile cache, and a plugin whose embedded code does not fit the
//! engine is compiled as any other.

use talaria_runtime::{CacheOutcome, Embedded, Precompiled, Runtime, RuntimeConfig};

fn fresh(bundled: &[Embedded]) -> (tempfile::TempDir, Runtime) {
    let home = tempfile::tempdir().expect("home");
    let config = RuntimeConfig::new(home.path().to_path_buf(), home.path().to_path_buf());
    let rt = Runtime::new(config, bundled).expect("runtime");
    (home, rt)
}

#[test]
fn a_fresh_home_loads_every_bundled_plugin_without_compiling() {
    let (home, rt) = fresh(&talaria_bundled::embedded());
    assert_eq!(rt.plugins().len(), talaria_bundled::PLUGINS.len());
    for plugin in rt.plugins() {
        assert!(!rt.needs_compile(plugin), "{} would be announced as compiling", plugin.name());
        let outcome = rt.prepare(plugin).expect("loads").map(|(o, _)| o);
        assert_eq!(outcome, Some(CacheOutcome::Precompiled), "{}", plugin.name());
    }
    let compiled: Vec<_> = walk(home.path()).into_iter().filter(|p| p.ends_with(".cwasm")).collect();
    assert!(compiled.is_empty(), "nothing was compiled into the cache: {compiled:?}");
}

#[test]
fn code_built_for_another_engine_is_compiled_instead() {
    let files = talaria_bundled::PLUGINS.iter().find(|b| b.manifest.contains("name = \"files\"")).expect("files");
    let mut foreign = files.embedded();
    foreign.precompiled = Some(Precompiled { code: b"not code", fingerprint: "0000000000000000" });
    let (_home, rt) = fresh(&[foreign]);
    let outcome = rt.prepare(&rt.plugins()[0]).expect("compiles").map(|(o, _)| o);
    assert_eq!(outcome, Some(CacheOutcome::Compiled));

    // The right fingerprint with bytes wasmtime refuses: compiled too, never loaded.
    let mut broken = files.embedded();
    broken.precompiled = Some(Precompiled { code: b"not code", fingerprint: talaria_bundled::ENGINE });
    let (_home, rt) = fresh(&[broken]);
    let outcome = rt.prepare(&rt.plugins()[0]).expect("compiles").map(|(o, _)| o);
    assert_eq!(outcome, Some(CacheOutcome::Compiled));
}

fn walk(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path.to_string_lossy().into_owned());
        }
    }
    out
}
