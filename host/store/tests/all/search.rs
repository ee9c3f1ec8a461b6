//! Search: syntax, filters, ranking, the substring and CJK paths, and inputs that must not fail.

use talaria_protocol::{Message, Role};
use talaria_store::{SearchHit, SearchQuery, Store};

use crate::{calls, create, tool_call};

// The same cases on SQLite and on a real PostgreSQL.
crate::on_both_engines!(
    words_are_anded_and_stemmed,
    phrases_prefixes_or_and_not,
    filters_by_role_and_session,
    hits_carry_session_role_and_a_marked_snippet,
    substrings_are_found_when_words_are_not,
    cjk_is_found_by_substring,
    nasty_inputs_never_fail,
    random_inputs_never_fail,
    ranking_is_bm25_then_newest,
);

/// Three sessions of known text. Returns the store and the ids of every message, by name.
async fn fixture(s: &Store) -> Ids {
    for id in ["alpha", "beta", "gamma"] {
        create(s, id).await;
    }
    s.set_title("alpha", "Docker notes").await.expect("title");
    let a = s
        .append_messages(
            "alpha",
            &[
                Message::user("How do I run docker compose with a custom network?"),
                Message::assistant("Use docker compose up with the networks key. The runner handles it."),
                calls("", vec![tool_call("c1", "terminal", r#"{"command":"docker ps --filter name=web"}"#)]),
                Message::tool("c1", "terminal", "CONTAINER ID   IMAGE   web-server-01"),
            ],
        )
        .await
        .expect("append");
    let b = s
        .append_messages(
            "beta",
            &[
                Message::user("Configure podman instead of docker"),
                Message::assistant("Podman is daemonless; the configuration lives in containers.conf"),
                Message::user("what about the async-std runtime and tokio runtime?"),
                Message::assistant("tokio runtime is more common than async-std"),
            ],
        )
        .await
        .expect("append");
    let g = s
        .append_messages(
            "gamma",
            &[
                Message::user("数据库迁移怎么做？"),
                Message::assistant("使用数据库迁移工具，例如 sqlx migrate。"),
                Message::user("カタカナのテスト"),
                Message::assistant("self.config_loader.reload() failed with ENOENT"),
            ],
        )
        .await
        .expect("append");
    Ids { a, b, g }
}

struct Ids {
    a: Vec<i64>,
    b: Vec<i64>,
    g: Vec<i64>,
}

async fn find(s: &Store, q: &SearchQuery<'_>) -> Vec<SearchHit> {
    s.search(q).await.unwrap_or_else(|e| panic!("search {:?} failed: {e}", q.text))
}

/// The ids of the hits for `text`, sorted.
async fn ids(s: &Store, text: &str) -> Vec<i64> {
    let mut v: Vec<i64> = find(s, &SearchQuery::new(text)).await.into_iter().map(|h| h.message_id).collect();
    v.sort_unstable();
    v
}

fn sorted(mut v: Vec<i64>) -> Vec<i64> {
    v.sort_unstable();
    v
}

async fn words_are_anded_and_stemmed(s: &Store) {
    let m = fixture(s).await;
    assert_eq!(ids(s, "docker network").await, [m.a[0], m.a[1]], "porter: networks = network");
    assert_eq!(ids(s, "custom network").await, [m.a[0]]);
    assert_eq!(ids(s, "runs DOCKER").await, [m.a[0]], "porter: runs = run, case folded");
    assert_eq!(ids(s, "async-std").await, [m.b[2], m.b[3]], "hyphenated words");
    assert_eq!(ids(s, "terminal").await, [m.a[2], m.a[3]], "tool names, in tool messages and tool calls");
    assert_eq!(ids(s, "filter").await, [m.a[2]], "tool call arguments");
}

async fn phrases_prefixes_or_and_not(s: &Store) {
    let m = fixture(s).await;
    assert_eq!(ids(s, "\"tokio runtime\"").await, [m.b[2], m.b[3]]);
    assert_eq!(ids(s, "\"runtime tokio\"").await, Vec::<i64>::new(), "phrase order matters");
    assert_eq!(ids(s, "\"tokio runtime").await, [m.b[2], m.b[3]], "an unclosed quote is closed");
    assert_eq!(ids(s, "conf").await, [m.b[1]]);
    assert_eq!(ids(s, "conf*").await, [m.b[0], m.b[1], m.g[3]]);
    assert_eq!(ids(s, "podman OR compose").await, sorted(vec![m.a[0], m.a[1], m.b[0], m.b[1]]));
    assert_eq!(ids(s, "docker NOT podman").await, [m.a[0], m.a[1], m.a[2]]);
    assert_eq!(ids(s, "docker podman").await, [m.b[0]]);
    assert_eq!(ids(s, "NOT podman").await, Vec::<i64>::new(), "nothing to subtract from");
    assert_eq!(ids(s, "docker or").await, [m.a[0], m.a[1]], "lower-case `or` is a word (found in network)");
    assert_eq!(ids(s, "docker xq").await, Vec::<i64>::new(), "short words count in the substring search");
    assert_eq!(ids(s, "OR docker AND").await, [m.a[0], m.a[1], m.a[2], m.b[0]], "dangling operators are dropped");
}

async fn filters_by_role_and_session(s: &Store) {
    let m = fixture(s).await;
    let q = SearchQuery::new("docker");
    async fn got(s: &Store, q: SearchQuery<'_>) -> Vec<i64> {
        sorted(find(s, &q).await.into_iter().map(|h| h.message_id).collect())
    }
    assert_eq!(got(s, SearchQuery { role: Some(Role::User), ..q }).await, [m.a[0], m.b[0]]);
    assert_eq!(got(s, SearchQuery { role: Some(Role::Assistant), ..q }).await, [m.a[1], m.a[2]]);
    assert_eq!(got(s, SearchQuery { session_id: Some("beta"), ..q }).await, [m.b[0]]);
    assert_eq!(got(s, SearchQuery { exclude_session: Some("alpha"), ..q }).await, [m.b[0]]);
    assert_eq!(
        got(s, SearchQuery { exclude_session: Some("alpha"), role: Some(Role::Assistant), ..q }).await,
        Vec::<i64>::new()
    );
    assert_eq!(find(s, &SearchQuery { limit: 1, ..q }).await.len(), 1);
    assert!(find(s, &SearchQuery { limit: 0, ..q }).await.is_empty());
}

async fn hits_carry_session_role_and_a_marked_snippet(s: &Store) {
    let m = fixture(s).await;
    let hits = find(s, &SearchQuery::new("custom network")).await;
    assert_eq!(hits.len(), 1);
    let h = &hits[0];
    assert_eq!(
        (h.session_id.as_str(), h.session_title.as_deref(), h.message_id, h.role),
        ("alpha", Some("Docker notes"), m.a[0], Role::User)
    );
    assert!(h.created_at > 1_600_000_000_000);
    assert!(h.snippet.contains(">>>custom<<<") && h.snippet.contains(">>>network<<<"), "{}", h.snippet);
    let hits = find(s, &SearchQuery::new("podman")).await;
    assert!(hits.iter().all(|h| h.snippet.to_lowercase().contains(">>>podman<<<") && h.session_title.is_none()));
}

async fn substrings_are_found_when_words_are_not(s: &Store) {
    let m = fixture(s).await;
    assert_eq!(ids(s, "onfig_load").await, [m.g[3]]);
    let hit = &find(s, &SearchQuery::new("onfig_load")).await[0];
    assert!(hit.snippet.contains(">>>onfig_load<<<") || hit.snippet.contains(">>>"), "{}", hit.snippet);
    assert_eq!(ids(s, "erver-0").await, [m.a[3]]);
    assert_eq!(ids(s, "emonle").await, [m.b[1]]);
    assert_eq!(ids(s, "zz").await, Vec::<i64>::new(), "too short for substrings");
    assert_eq!(ids(s, "onfig_load NOT reload").await, Vec::<i64>::new(), "NOT holds for substrings");
}

async fn cjk_is_found_by_substring(s: &Store) {
    let m = fixture(s).await;
    assert_eq!(ids(s, "数据库迁移").await, [m.g[0], m.g[1]]);
    assert_eq!(ids(s, "迁移工具").await, [m.g[1]]);
    assert_eq!(ids(s, "数据").await, [m.g[0], m.g[1]], "two-character words");
    assert_eq!(ids(s, "カタ").await, [m.g[2]]);
    assert_eq!(ids(s, "数据 sqlx").await, [m.g[1]], "mixed with a latin word");
    assert_eq!(ids(s, "数据 NOT 工具").await, [m.g[0]]);
    assert_eq!(ids(s, "漢字").await, Vec::<i64>::new());
    // One and two characters: exactly where they stand next to each other, never across a gap.
    assert_eq!(ids(s, "做").await, [m.g[0]], "one character");
    assert_eq!(ids(s, "移工").await, [m.g[1]]);
    assert_eq!(ids(s, "据使").await, Vec::<i64>::new(), "not next to each other anywhere");
    assert_eq!(ids(s, "テ NOT 迁").await, [m.g[2]]);
    // In a tool's name and arguments too, as the substring search finds longer terms there.
    create(s, "delta").await;
    let d = s
        .append_messages("delta", &[calls("", vec![tool_call("c9", "検索", r#"{"query":"東京 天気"}"#)])])
        .await
        .expect("append");
    assert_eq!(ids(s, "検索").await, [d[0]], "a tool's name");
    assert_eq!(ids(s, "天気").await, [d[0]], "a call's arguments");
    assert_eq!(ids(s, "京天").await, Vec::<i64>::new(), "a space between them");
    let hit = &find(s, &SearchQuery::new("迁移工具")).await[0];
    assert!(hit.snippet.contains(">>>"), "{}", hit.snippet);
    let hit = &find(s, &SearchQuery { role: Some(Role::User), ..SearchQuery::new("数据") }).await[0];
    assert_eq!(hit.snippet, ">>>数据<<<库迁移怎么做？");
}

async fn ranking_is_bm25_then_newest(s: &Store) {
    create(s, "r").await;
    let long = format!("kiwi {}", "filler words about nothing in particular ".repeat(20));
    let ids = s
        .append_messages(
            "r",
            &[
                Message::user(long),
                Message::user("kiwi kiwi kiwi"),
                Message::user("mango smoothie"),
                Message::user("mango smoothie"),
            ],
        )
        .await
        .expect("append");
    async fn order(s: &Store, q: &str) -> Vec<i64> {
        find(s, &SearchQuery::new(q)).await.into_iter().map(|h| h.message_id).collect::<Vec<_>>()
    }
    assert_eq!(order(s, "kiwi").await, [ids[1], ids[0]]);
    assert_eq!(order(s, "mango").await, [ids[3], ids[2]]);
}

/// Inputs that break naive FTS5 query building.
const NASTY: &[&str] = &[
    "",
    " ",
    "\"",
    "\"\"",
    "\"\"\"",
    "'",
    "*",
    "**",
    "a*b*",
    "^docker",
    "docker^",
    "+docker",
    "-docker",
    "(docker",
    "docker)",
    "((docker))",
    "{docker}",
    "[docker]",
    "docker:",
    ":docker",
    "content:docker",
    "tool_name:terminal",
    "NEAR(docker compose)",
    "NEAR(docker compose, 2)",
    "docker NEAR compose",
    "AND",
    "OR",
    "NOT",
    "AND OR NOT",
    "docker AND",
    "OR docker",
    "NOT docker",
    "docker NOT",
    "docker OR OR compose",
    "docker NOT NOT compose",
    "docker AND NOT OR compose",
    "\"docker",
    "docker\"",
    "do\"cker",
    "\"docker\"*",
    "\"docker\"\"compose\"",
    "docker;DROP TABLE messages;--",
    "'; DELETE FROM sessions; --",
    "%",
    "_",
    "\\",
    "\\\"",
    "\u{0}",
    "docker\u{0}compose",
    "\u{7}\u{1b}[31m",
    "\n\t\r",
    "🚀",
    "🚀🚀🚀",
    "数",
    "\"数据",
    "数据*",
    "NOT 数据",
    "数据 OR",
    "ｄｏｃｋｅｒ",
    "é",
    "---",
    "->",
    "a->b",
    "x=>y",
    "$(rm -rf /)",
    "`cat /etc/passwd`",
    "docker*compose",
    "*docker",
    "@@@",
    "#!/bin/sh",
    "1",
    "12",
    "123",
    "0x1F",
    "-1",
    "1e10",
    "docker -compose",
    "docker - compose",
    "\u{202e}reversed",
    "\u{feff}bom",
    "\u{fffd}",
];

async fn nasty_inputs_never_fail(s: &Store) {
    fixture(s).await;
    for text in NASTY {
        for role in [None, Some(Role::Tool)] {
            let q = SearchQuery { role, session_id: None, ..SearchQuery::new(text) };
            assert!(s.search(&q).await.is_ok(), "search {text:?} failed: {:?}", s.search(&q).await);
        }
    }
    let many: Vec<String> = (0..400).map(|i| format!("w{i}")).collect();
    for op in [" OR ", " NOT ", " AND ", " ", " OR NOT "] {
        let text = many.join(op);
        assert!(s.search(&SearchQuery::new(&text)).await.is_ok(), "{op:?}");
    }
    let long = "docker ".repeat(5000);
    assert!(s.search(&SearchQuery::new(&long)).await.is_ok());
    let long_quote = format!("\"{}", "x".repeat(100_000));
    assert!(s.search(&SearchQuery::new(&long_quote)).await.is_ok());
}

async fn random_inputs_never_fail(s: &Store) {
    fixture(s).await;
    let pieces: &[&str] = &[
        "docker",
        "compose",
        "数据",
        "库",
        "カ",
        "AND",
        "OR",
        "NOT",
        "NEAR",
        "\"",
        "\"",
        "*",
        "(",
        ")",
        ":",
        "^",
        "+",
        "-",
        "{",
        "}",
        "'",
        ";",
        "%",
        "_",
        "\\",
        " ",
        " ",
        " ",
        "\u{0}",
        "é",
        "🚀",
        "a",
        "tokio",
        "run",
        ",",
        ".",
        "/",
        "config_loader",
        "x",
        "\t",
        "\n",
    ];
    let mut rng = fastrand::Rng::with_seed(0x7a1a_71a5);
    for _ in 0..3000 {
        let n = rng.usize(0..12);
        let text: String = (0..n).map(|_| pieces[rng.usize(..pieces.len())]).collect();
        let q = SearchQuery::new(&text);
        if let Err(e) = s.search(&q).await {
            panic!("search {text:?} failed: {e}");
        }
    }
    for _ in 0..2000 {
        let n = rng.usize(0..16);
        let text: String = (0..n).map(|_| char::from_u32(rng.u32(0..0x3_0000)).unwrap_or(' ')).collect();
        if let Err(e) = s.search(&SearchQuery::new(&text)).await {
            panic!("search {text:?} failed: {e}");
        }
    }
}
