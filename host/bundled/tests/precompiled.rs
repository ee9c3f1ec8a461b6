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

/// The bundled code runs from the binary's own pages, which stay read-only (never writable
/// while executable), and one load serves every runtime of the process: dropping one runtime
/// leaves another's calls working.
#[test]
fn bundled_code_runs_where_the_binary_holds_it_and_every_runtime_shares_it() {
    let files = talaria_bundled::PLUGINS.iter().find(|b| b.manifest.contains("name = \"files\"")).expect("files");
    let read = |rt: &Runtime, ws: &std::path::Path| {
        let ctx =
            talaria_protocol::ToolContext::new("read_file", serde_json::json!({"path": "note.txt"})).in_workspace(ws);
        let tokio = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio");
        tokio.block_on(rt.call(&ctx)).expect("read_file runs").output
    };
    let workspace = tempfile::tempdir().expect("workspace");
    std::fs::write(workspace.path().join("note.txt"), "kept in place").expect("write");
    let runtime = |home: &tempfile::TempDir| {
        let config = RuntimeConfig::new(home.path().to_path_buf(), workspace.path().to_path_buf());
        Runtime::new(config, &talaria_bundled::embedded()).expect("runtime")
    };
    let (first_home, second_home) = (tempfile::tempdir().expect("home"), tempfile::tempdir().expect("home"));
    let (first, second) = (runtime(&first_home), runtime(&second_home));
    assert!(read(&first, workspace.path()).contains("kept in place"));
    assert!(read(&second, workspace.path()).contains("kept in place"));

    // The page the files plugin's code starts on (its text section begins a page in).
    let text = files.precompiled.as_ptr().addr() + 4096;
    let maps = std::fs::read_to_string("/proc/self/maps").expect("maps");
    let holding: Vec<&str> = maps
        .lines()
        .filter(|l| {
            let range = l.split_whitespace().next().unwrap_or_default();
            let (lo, hi) = range.split_once('-').unwrap_or_default();
            let (lo, hi) = (usize::from_str_radix(lo, 16).unwrap_or(0), usize::from_str_radix(hi, 16).unwrap_or(0));
            (lo..hi).contains(&text)
        })
        .collect();
    assert_eq!(holding.len(), 1, "{maps}");
    let perms = holding[0].split_whitespace().nth(1).unwrap_or_default();
    assert_eq!(perms, "r-xp", "the code runs from the binary's pages, read-only: {}", holding[0]);
    let binary = std::env::current_exe().expect("exe");
    assert!(holding[0].ends_with(&*binary.to_string_lossy()), "a mapping of the binary itself: {}", holding[0]);

    drop(first);
    assert!(read(&second, workspace.path()).contains("kept in place"), "the other runtime still runs it");
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
