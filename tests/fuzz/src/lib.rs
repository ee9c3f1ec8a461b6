//! Fuzzing on the stable toolchain: each target is a property over untrusted bytes (or text),
//! run by [`bytes`] or [`text`] on
//! 1. the seeds checked in under `tests/fuzz/corpus/TARGET/` (real inputs of that parser),
//! 2. those seeds mutated (bytes flipped, inserted, cut, spliced with another seed),
//! 3. random inputs,
//!
//! with proptest shrinking what fails to a small case, which the test then names. A normal test
//! run tries [`CASES`] cases per target; `FUZZ_CASES=N` tries N, and `FUZZ_SECONDS=S` keeps
//! going for S seconds (`scripts/fuzz` runs every target that way and prints the figures). A
//! crash found becomes a seed of its target's corpus, so every later run tries it first.
//!
//! ```
//! talaria_fuzz::text("doc-example", |s| {
//!     assert!(s.chars().count() <= s.len());
//! });
//! ```

use std::path::PathBuf;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

/// Cases per target in a normal test run.
pub const CASES: u32 = 300;

/// The checked-in seeds of `target`.
pub fn seeds(target: &str) -> Vec<Vec<u8>> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("corpus").join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|entries| entries.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.sort();
    files.iter().filter_map(|f| std::fs::read(f).ok()).collect()
}

/// Inputs for `target`: its seeds as they are, mutated, and random bytes.
fn inputs(target: &str) -> BoxedStrategy<Vec<u8>> {
    let random = prop::collection::vec(any::<u8>(), 0..512).boxed();
    let seeds = seeds(target);
    if seeds.is_empty() {
        return random;
    }
    let whole = prop::sample::select(seeds.clone()).boxed();
    let edits = prop::collection::vec((any::<prop::sample::Index>(), 0u8..4, any::<u8>()), 1..12);
    let mutated = (prop::sample::select(seeds.clone()), prop::sample::select(seeds), edits)
        .prop_map(|(mut input, other, edits)| {
            for (at, kind, byte) in edits {
                let i = if input.is_empty() { 0 } else { at.index(input.len()) };
                match kind {
                    0 if !input.is_empty() => input[i] = byte,
                    1 => input.insert(i.min(input.len()), byte),
                    2 if !input.is_empty() => {
                        input.remove(i);
                    }
                    _ => {
                        // Splice: this seed's head, the other's tail.
                        let j = if other.is_empty() { 0 } else { at.index(other.len()) };
                        input.truncate(i);
                        input.extend_from_slice(&other[j..]);
                    }
                }
            }
            input
        })
        .boxed();
    prop_oneof![1 => whole, 6 => mutated, 2 => random].boxed()
}

/// Run `property` on byte inputs for `target` (see the crate's documentation for which and how
/// many). A panic in it, or a failed assertion, fails the test with the smallest input found.
pub fn bytes(target: &str, property: impl Fn(&[u8])) {
    run(target, inputs(target), |input: Vec<u8>| property(&input));
}

/// [`bytes`] for a target whose cases are costly (a whole model turn each): a quarter of the
/// cases in a normal test run; `FUZZ_CASES` and `FUZZ_SECONDS` as for the others.
pub fn bytes_costly(target: &str, property: impl Fn(&[u8])) {
    run_with(target, inputs(target), CASES / 4, |input: Vec<u8>| property(&input));
}

/// [`bytes`] for parsers of text: the inputs as UTF-8, invalid sequences replaced.
pub fn text(target: &str, property: impl Fn(&str)) {
    let strategy = inputs(target).prop_map(|b| String::from_utf8_lossy(&b).into_owned());
    run(target, strategy, |input: String| property(&input));
}

fn run<S: Strategy>(target: &str, strategy: S, property: impl Fn(S::Value))
where
    S::Value: std::fmt::Debug,
{
    run_with(target, strategy, CASES, property);
}

fn run_with<S: Strategy>(target: &str, strategy: S, default_cases: u32, property: impl Fn(S::Value))
where
    S::Value: std::fmt::Debug,
{
    let env = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
    let seconds = env("FUZZ_SECONDS");
    let cases = env("FUZZ_CASES").map_or(default_cases, |n| u32::try_from(n).unwrap_or(u32::MAX));
    let until = seconds.map(|s| Instant::now() + Duration::from_secs(s));
    let started = Instant::now();
    let mut total: u64 = 0;
    loop {
        let batch = if until.is_some() { 200 } else { cases };
        let config = Config { cases: batch, failure_persistence: None, ..Config::default() };
        let mut runner = TestRunner::new(config);
        let outcome = runner.run(&strategy, |input| {
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| property(input))) {
                Ok(()) => Ok(()),
                Err(e) => {
                    let why = e
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| e.downcast_ref::<&str>().map(|s| (*s).to_string()))
                        .unwrap_or_default();
                    Err(TestCaseError::fail(why))
                }
            }
        });
        total += u64::from(batch);
        if let Err(e) = outcome {
            panic!("fuzz target {target} failed after about {total} cases: {e}");
        }
        if until.is_none_or(|u| Instant::now() >= u) {
            break;
        }
    }
    if seconds.is_some() {
        println!("fuzz {target}: {total} cases in {:.0} s, no failure", started.elapsed().as_secs_f64());
    }
}
