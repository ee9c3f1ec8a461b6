//! Plugin bundles in an OCI registry, against a real one: Debian's docker-registry (CNCF
//! distribution) on loopback, one per test.

use std::path::PathBuf;

use oci_client::client::{ClientConfig, ClientProtocol, Config, ImageLayer};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use talaria_market::oci::{
    self, BUNDLE_MEDIA_TYPE, CONFIG_MEDIA_TYPE, MAX_CONFIG_BYTES, OciError, OciRef, PASSWORD_ENV, USERNAME_ENV,
};
use talaria_test_support::registry::Registry;

const CONFIG: &[u8] = br#"{"name":"hello","version":"1.0.0","api":"0.2.0","kinds":["tool"],"capabilities":["net:api.example.com"],"description":"says hello"}"#;
const SIGNATURE: &[u8] = br#"{"key":"ed25519:abc","signature":"def"}"#;

fn tls() {
    // Another test may have installed it already.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

fn reference(registry: &Registry, rest: &str) -> OciRef {
    format!("oci://{}/{rest}", registry.host()).parse().unwrap_or_else(|e| panic!("{rest}: {e}"))
}

/// `len` bytes that do not repeat in any short period (so a tampered copy really differs).
fn bundle(len: usize) -> Vec<u8> {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

/// Where the filesystem storage keeps the blob with `digest`.
fn blob_path(registry: &Registry, digest: &str) -> PathBuf {
    let hex = digest.strip_prefix("sha256:").unwrap_or_else(|| panic!("not sha256: {digest}"));
    registry.storage().join("docker/registry/v2/blobs/sha256").join(&hex[..2]).join(hex).join("data")
}

fn sha256(data: &[u8]) -> String {
    use sha2::Digest as _;
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(data)))
}

#[tokio::test]
async fn pushed_plugin_pulls_back_identical_by_tag_and_by_digest() {
    tls();
    let registry = Registry::start();
    // Over oci-client's 4 MiB push chunk, so the upload takes more than one PATCH.
    let bundle = bundle(5 * 1024 * 1024 + 17);
    let tagged = reference(&registry, "plugins/hello:1.0.0");
    let digest = oci::push(&tagged, &bundle, Some(SIGNATURE), CONFIG).await.unwrap_or_else(|e| panic!("{e}"));
    assert!(digest.starts_with("sha256:") && digest.len() == 71, "{digest}");

    let pulled = oci::pull(&tagged, 6 * 1024 * 1024).await.unwrap_or_else(|e| panic!("{e}"));
    assert!(pulled.bundle == bundle, "bundle differs");
    assert_eq!(pulled.signature.as_deref(), Some(SIGNATURE));
    assert_eq!(pulled.config, CONFIG);
    assert_eq!(pulled.manifest_digest, digest);

    let pinned = reference(&registry, &format!("plugins/hello@{digest}"));
    assert_eq!(pinned.digest(), Some(digest.as_str()));
    let by_digest = oci::pull(&pinned, 6 * 1024 * 1024).await.unwrap_or_else(|e| panic!("{e}"));
    assert!(by_digest == pulled, "by digest: {by_digest:?}, by tag: {pulled:?}");

    // Pushing the same plugin again (blobs already there) gives the same manifest.
    let again = oci::push(&reference(&registry, "plugins/hello:again"), &bundle, Some(SIGNATURE), CONFIG).await;
    assert_eq!(again.ok(), Some(digest));
}

#[tokio::test]
async fn plugin_without_signature_pulls_with_none() {
    tls();
    let registry = Registry::start();
    let r = reference(&registry, "plugins/unsigned"); // tag defaults to latest
    let digest = oci::push(&r, b"bundle bytes", None, CONFIG).await.unwrap_or_else(|e| panic!("{e}"));
    let pulled =
        oci::pull(&reference(&registry, "plugins/unsigned:latest"), 1024).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(pulled.signature, None);
    assert_eq!(pulled.bundle, b"bundle bytes");
    assert_eq!(pulled.config, CONFIG);
    assert_eq!(pulled.manifest_digest, digest);
}

#[tokio::test]
async fn tags_lists_the_pushed_tags_and_a_missing_repository_is_not_found() {
    tls();
    let registry = Registry::start();
    for tag in ["1.1.0", "1.0.0", "latest"] {
        let r = reference(&registry, &format!("plugins/hello:{tag}"));
        oci::push(&r, tag.as_bytes(), None, CONFIG).await.unwrap_or_else(|e| panic!("{tag}: {e}"));
    }
    let tags = oci::tags(&reference(&registry, "plugins/hello:whatever")).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(tags, ["1.0.0", "1.1.0", "latest"]);

    let err = oci::tags(&reference(&registry, "plugins/nope")).await.expect_err("no such repository");
    let expected = format!("oci://{}/plugins/nope", registry.host());
    assert!(matches!(&err, OciError::NotFound { reference } if *reference == expected), "{err:?}");
    assert_eq!(err.to_string(), format!("{expected} was not found: check the host, repository and tag (or digest)"));
}

#[tokio::test]
async fn missing_tag_or_repository_is_not_found_naming_the_reference() {
    tls();
    let registry = Registry::start();
    oci::push(&reference(&registry, "plugins/hello:1.0.0"), b"b", None, CONFIG).await.unwrap_or_else(|e| panic!("{e}"));
    for missing in ["plugins/hello:2.0.0", "plugins/absent:1.0.0"] {
        let r = reference(&registry, missing);
        let err = oci::pull(&r, 1024).await.expect_err(missing);
        assert!(matches!(&err, OciError::NotFound { reference } if *reference == r.to_string()), "{err:?}");
        assert!(err.to_string().starts_with(&format!("oci://{}/{missing} was not found", registry.host())), "{err}");
    }
}

/// Layers as (media type, data).
type Layers<'a> = &'a [(&'a str, &'a [u8])];

/// Push an artifact with `layers` and a config of `config_type` with oci-client itself.
async fn push_foreign(registry: &Registry, repository: &str, layers: Layers<'_>, config_type: &str) {
    let client = Client::try_from(ClientConfig { protocol: ClientProtocol::Http, ..ClientConfig::default() })
        .unwrap_or_else(|e| panic!("client: {e}"));
    let image = Reference::with_tag(registry.host(), repository.to_string(), "1.0.0".to_string());
    let layers: Vec<ImageLayer> =
        layers.iter().map(|(media_type, data)| ImageLayer::new(data.to_vec(), media_type.to_string(), None)).collect();
    let config = Config::new(b"{}".to_vec(), config_type.to_string(), None);
    client.push(&image, &layers, config, &RegistryAuth::Anonymous, None).await.unwrap_or_else(|e| panic!("push: {e}"));
}

#[tokio::test]
async fn foreign_artifacts_are_not_talaria_plugins() {
    tls();
    let registry = Registry::start();
    let gzip_layer = "application/vnd.oci.image.layer.v1.tar+gzip";
    let image_config = "application/vnd.oci.image.config.v1+json";
    let cases: [(&str, Layers<'_>, &str, String); 4] = [
        ("image", &[(gzip_layer, b"rootfs")], image_config, format!("layers: {gzip_layer}; config: {image_config}")),
        (
            "extra-layer",
            &[(BUNDLE_MEDIA_TYPE, b"bundle"), (gzip_layer, b"rootfs")],
            CONFIG_MEDIA_TYPE,
            format!("layers: {BUNDLE_MEDIA_TYPE}, {gzip_layer}; config: {CONFIG_MEDIA_TYPE}"),
        ),
        (
            "two-bundles",
            &[(BUNDLE_MEDIA_TYPE, b"one"), (BUNDLE_MEDIA_TYPE, b"two")],
            CONFIG_MEDIA_TYPE,
            format!("layers: {BUNDLE_MEDIA_TYPE}, {BUNDLE_MEDIA_TYPE}; config: {CONFIG_MEDIA_TYPE}"),
        ),
        (
            "image-config",
            &[(BUNDLE_MEDIA_TYPE, b"bundle")],
            image_config,
            format!("layers: {BUNDLE_MEDIA_TYPE}; config: {image_config}"),
        ),
    ];
    for (repository, layers, config_type, found) in cases {
        push_foreign(&registry, repository, layers, config_type).await;
        let r = reference(&registry, &format!("{repository}:1.0.0"));
        let err = oci::pull(&r, 1024).await.expect_err(repository);
        assert!(
            matches!(&err, OciError::NotAPlugin { reference, found: f } if *reference == r.to_string() && *f == found),
            "{repository}: {err:?}"
        );
        assert!(err.to_string().starts_with(&format!("{r}: not a talaria plugin ({found}); ")), "{err}");
    }
}

#[tokio::test]
async fn bundle_over_the_limit_is_refused_before_download() {
    tls();
    let registry = Registry::start();
    let bundle = bundle(10_000);
    let r = reference(&registry, "plugins/big:1.0.0");
    oci::push(&r, &bundle, Some(SIGNATURE), CONFIG).await.unwrap_or_else(|e| panic!("{e}"));
    // With the blob gone, any attempt to download it would fail differently.
    std::fs::remove_file(blob_path(&registry, &sha256(&bundle))).unwrap_or_else(|e| panic!("remove blob: {e}"));

    let err = oci::pull(&r, 9_999).await.expect_err("over the limit");
    assert!(
        matches!(&err, OciError::TooLarge { what: "bundle", size: 10_000, limit: 9_999, reference } if *reference == r.to_string()),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        format!("{r}: the bundle is 10000 bytes, over the limit of 9999 bytes; it was not downloaded")
    );

    // At the limit it is downloaded, and the missing blob shows.
    let err = oci::pull(&r, 10_000).await.expect_err("blob removed");
    assert!(matches!(&err, OciError::Registry { detail, .. } if detail.contains("lost the bundle")), "{err:?}");
}

#[tokio::test]
async fn oversized_config_is_refused() {
    tls();
    let registry = Registry::start();
    let padding = "x".repeat(MAX_CONFIG_BYTES as usize);
    let config = format!(r#"{{"name":"fat","description":"{padding}"}}"#);
    let r = reference(&registry, "plugins/fat:1.0.0");
    oci::push(&r, b"bundle", None, config.as_bytes()).await.unwrap_or_else(|e| panic!("{e}"));
    let err = oci::pull(&r, 1024).await.expect_err("config too large");
    assert!(
        matches!(&err, OciError::TooLarge { what: "config", size, limit: MAX_CONFIG_BYTES, .. } if *size == config.len() as u64),
        "{err:?}"
    );
}

#[tokio::test]
async fn tampered_blobs_are_caught() {
    tls();
    let registry = Registry::start();
    let bundle = bundle(64 * 1024);
    let r = reference(&registry, "plugins/hello:1.0.0");
    oci::push(&r, &bundle, Some(SIGNATURE), CONFIG).await.unwrap_or_else(|e| panic!("{e}"));
    let digest = sha256(&bundle);
    let path = blob_path(&registry, &digest);

    // Same length, different bytes: only the digest can tell.
    let mut evil = bundle.clone();
    evil[1000] ^= 0xff;
    std::fs::write(&path, &evil).unwrap_or_else(|e| panic!("tamper: {e}"));
    let err = oci::pull(&r, 1 << 20).await.expect_err("tampered bundle");
    assert!(
        matches!(&err, OciError::DigestMismatch { what: "bundle", expected, actual, .. } if *expected == digest && *actual == sha256(&evil)),
        "{err:?}"
    );
    assert!(err.to_string().contains("does not match its digest"), "{err}");

    // Longer than the manifest says: refused on the declared length.
    evil.extend_from_slice(b"trailing payload");
    std::fs::write(&path, &evil).unwrap_or_else(|e| panic!("tamper: {e}"));
    let err = oci::pull(&r, 1 << 20).await.expect_err("longer bundle");
    assert!(
        matches!(&err, OciError::SizeMismatch { what: "bundle", declared: 65_536, received: 65_552, .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn unreachable_registry_says_so() {
    tls();
    // A port nobody listens on: bind one, then let it go.
    let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port());
    let r: OciRef =
        format!("oci://127.0.0.1:{}/plugins/hello:1.0.0", port.unwrap_or(9)).parse().unwrap_or_else(|e| panic!("{e}"));
    let err = oci::pull(&r, 1024).await.expect_err("nothing listens");
    assert!(
        matches!(&err, OciError::Unreachable { scheme: "http", reference, .. } if *reference == r.to_string()),
        "{err:?}"
    );
    assert!(err.to_string().starts_with(&format!("{r}: could not reach the registry over http: ")), "{err}");
}

#[tokio::test]
async fn push_refuses_a_digest_reference_and_a_config_that_is_not_json() {
    tls();
    let digest = format!("sha256:{}", "a".repeat(64));
    let pinned: OciRef = format!("oci://127.0.0.1:1/plugins/hello@{digest}").parse().unwrap_or_else(|e| panic!("{e}"));
    let err = oci::push(&pinned, b"b", None, CONFIG).await.expect_err("digest reference");
    assert!(matches!(&err, OciError::BadReference { problem, .. } if problem.contains("push to a tag")), "{err:?}");

    let tagged: OciRef = "oci://127.0.0.1:1/plugins/hello:1.0.0".parse().unwrap_or_else(|e| panic!("{e}"));
    let err = oci::push(&tagged, b"b", None, b"name = 'toml'").await.expect_err("not JSON");
    assert!(matches!(err, OciError::BadConfig(_)), "{err:?}");
}

#[test]
fn references_parse_and_print_back() {
    let digest = format!("sha256:{}", "0123456789abcdef".repeat(4));
    let check = |input: &str, parts: (&str, &str, Option<&str>, Option<&str>), printed: &str| {
        let r: OciRef = input.parse().unwrap_or_else(|e| panic!("{input}: {e}"));
        assert_eq!((r.host(), r.repository(), r.tag(), r.digest()), parts, "{input}");
        assert_eq!(r.to_string(), printed);
        assert_eq!(printed.parse::<OciRef>().ok(), Some(r), "{printed} round-trips");
    };
    let tagged = "oci://ghcr.io/acme/weather:1.2.0";
    check(tagged, ("ghcr.io", "acme/weather", Some("1.2.0"), None), tagged);
    check(
        "oci://registry.example.com:5000/a/b/c",
        ("registry.example.com:5000", "a/b/c", Some("latest"), None),
        "oci://registry.example.com:5000/a/b/c:latest",
    );
    // A single-segment repository stays as written: no Docker Hub `library/`.
    check("oci://docker.io/weather", ("docker.io", "weather", Some("latest"), None), "oci://docker.io/weather:latest");
    let pinned = format!("oci://localhost:5000/plugins/hello@{digest}");
    check(&pinned, ("localhost:5000", "plugins/hello", None, Some(&digest)), &pinned);
    let both = format!("oci://[::1]:5000/hello:v2@{digest}");
    check(&both, ("[::1]:5000", "hello", Some("v2"), Some(&digest)), &both);

    let form = "write oci://HOST/REPO[:TAG] or oci://HOST/REPO@sha256:DIGEST";
    let bad = [
        ("oci://x", "`oci://x` has no repository: write oci://HOST/REPO[:TAG]".to_string()),
        ("oci://x/", "`oci://x/` has no repository: write oci://HOST/REPO[:TAG]".to_string()),
        ("oci://x/:1.0", "`oci://x/:1.0` has no repository: write oci://HOST/REPO[:TAG]".to_string()),
        ("ghcr.io/acme/weather", format!("`ghcr.io/acme/weather` is not an OCI reference: {form}")),
        ("https://ghcr.io/acme/weather", format!("`https://ghcr.io/acme/weather` is not an OCI reference: {form}")),
        ("oci:///acme/weather", format!("`oci:///acme/weather` has no registry host: {form}")),
    ];
    for (input, message) in bad {
        let err = input.parse::<OciRef>().expect_err(input);
        assert!(matches!(&err, OciError::BadReference { input: i, .. } if i == input), "{err:?}");
        assert_eq!(err.to_string(), message);
    }
    for input in
        ["oci://user@ghcr.io/acme/w", "oci://ghcr.io:99999/acme/w", "oci://gh cr.io/acme/w", "oci://ghcr.io?x/acme/w"]
    {
        let err = input.parse::<OciRef>().expect_err(input);
        assert!(err.to_string().starts_with(&format!("`{input}` has an invalid registry host")), "{input}: {err}");
    }
    for input in ["oci://ghcr.io/Acme/weather", "oci://ghcr.io/acme/weather:bad:tag", "oci://ghcr.io/acme/w@sha256:abc"]
    {
        let err = input.parse::<OciRef>().expect_err(input);
        assert!(
            err.to_string().starts_with(&format!("`{input}` has an invalid repository, tag or digest")),
            "{input}: {err}"
        );
    }
}

#[test]
fn plain_http_is_for_loopback_hosts_only() {
    let cases = [
        ("127.0.0.1:5000", "http"),
        ("127.3.2.1", "http"),
        ("127.1:5000", "http"),
        ("localhost:5000", "http"),
        ("LOCALHOST", "http"),
        ("[::1]:5000", "http"),
        ("ghcr.io", "https"),
        ("192.168.1.10:5000", "https"),
        ("10.0.0.1", "https"),
        ("[::ffff:127.0.0.1]", "https"),
        ("localhost.example.com", "https"),
        ("127.0.0.1.nip.io", "https"),
        ("my-localhost", "https"),
    ];
    for (host, scheme) in cases {
        let r: OciRef = format!("oci://{host}/p/hello").parse().unwrap_or_else(|e| panic!("{host}: {e}"));
        assert_eq!(r.scheme(), scheme, "{host}");
    }
}

/// The credentials come from the environment, so the half that needs them runs in a child
/// process (setting variables in this one would race the other tests).
#[test]
fn basic_auth_comes_from_the_environment() {
    tls();
    // testuser:testpassword (bcrypt), as in oci-client's own tests.
    let registry =
        Registry::start_with_htpasswd("testuser:$2y$05$8/q2bfRcX74EuxGf0qOcSuhWDQJXrgWiy6Fi73/JM2tKC66qSrLve");
    let r = reference(&registry, "plugins/private:1.0.0");
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap_or_else(|e| panic!("{e}"));
    let err = runtime.block_on(oci::pull(&r, 1024)).expect_err("anonymous");
    assert!(matches!(&err, OciError::Unauthorized { anonymous: true, .. }), "{err:?}");
    assert!(err.to_string().contains(&format!("set {USERNAME_ENV} and {PASSWORD_ENV}")), "{err}");

    for (password, expect) in [("testpassword", "ok"), ("wrong", "unauthorized")] {
        let exe = std::env::current_exe().unwrap_or_else(|e| panic!("{e}"));
        let output = std::process::Command::new(exe)
            .args(["--exact", "basic_auth_child", "--ignored", "--nocapture", "--test-threads=1"])
            .env("TALARIA_TEST_OCI_REF", r.to_string())
            .env("TALARIA_TEST_OCI_EXPECT", expect)
            .env(USERNAME_ENV, "testuser")
            .env(PASSWORD_ENV, password)
            .output()
            .unwrap_or_else(|e| panic!("child: {e}"));
        let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        assert!(output.status.success() && text.contains("1 passed"), "password {password}:\n{text}");
    }
}

/// Run by `basic_auth_comes_from_the_environment` with the credentials in its environment.
#[tokio::test]
#[ignore = "run by basic_auth_comes_from_the_environment, in a child process"]
async fn basic_auth_child() {
    tls();
    let (Ok(r), Ok(expect)) = (std::env::var("TALARIA_TEST_OCI_REF"), std::env::var("TALARIA_TEST_OCI_EXPECT")) else {
        return; // run directly (`--include-ignored`): there is no registry to talk to
    };
    let r: OciRef = r.parse().unwrap_or_else(|e| panic!("{e}"));
    match expect.as_str() {
        "ok" => {
            let digest = oci::push(&r, b"private bundle", None, CONFIG).await.unwrap_or_else(|e| panic!("push: {e}"));
            let pulled = oci::pull(&r, 1024).await.unwrap_or_else(|e| panic!("pull: {e}"));
            assert_eq!((pulled.bundle.as_slice(), pulled.manifest_digest), (&b"private bundle"[..], digest));
            assert_eq!(oci::tags(&r).await.ok(), Some(vec!["1.0.0".to_string()]));
        }
        _ => {
            let err = oci::pull(&r, 1024).await.expect_err("wrong password");
            assert!(matches!(&err, OciError::Unauthorized { anonymous: false, .. }), "{err:?}");
            assert!(err.to_string().contains(&format!("check {USERNAME_ENV} and {PASSWORD_ENV}")), "{err}");
        }
    }
}
