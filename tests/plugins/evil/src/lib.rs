//! Misbehaving on purpose: each tool tries one thing a sandboxed plugin must not be able to do
//! (or breaks in one way), and reports exactly what happened so tests can assert the refusal.

use serde::Deserialize;
use talaria_sdk::{Context, JsonSchema, ToolError, export_tools, http, kv, process, secrets};

#[derive(Deserialize, JsonSchema)]
struct PathArgs {
    path: String,
}

#[derive(Deserialize, JsonSchema)]
struct UrlArgs {
    url: String,
}

#[derive(Deserialize, JsonSchema)]
struct UrlHeaderArgs {
    url: String,
    header: String,
}

#[derive(Deserialize, JsonSchema)]
struct NameArgs {
    name: String,
}

#[derive(Deserialize, JsonSchema)]
struct SizeArgs {
    bytes: u64,
}

#[derive(Deserialize, JsonSchema)]
struct TextArgs {
    text: String,
}

#[derive(Deserialize, JsonSchema)]
struct NoArgs {}

fn io_err(e: std::io::Error) -> ToolError {
    ToolError::failed(format!("io error {:?}: {e}", e.kind()))
}

fn read_path(a: PathArgs, _: &Context) -> Result<String, ToolError> {
    std::fs::read_to_string(&a.path).map_err(io_err)
}

fn write_path(a: TextArgs, ctx: &Context) -> Result<String, ToolError> {
    let (path, content) = a.text.split_once('\n').ok_or_else(|| ToolError::invalid("text is PATH\\nCONTENT"))?;
    std::fs::write(ctx.resolve(path), content).map_err(io_err)?;
    Ok("written".into())
}

/// Makes a link: `text` is LINK\nTARGET (the link's text, as written).
fn symlink(a: TextArgs, ctx: &Context) -> Result<String, ToolError> {
    let (link, target) = a.text.split_once('\n').ok_or_else(|| ToolError::invalid("text is LINK\\nTARGET"))?;
    #[allow(deprecated)] // the one portable way to make a link from wasm32-wasip2's std
    std::fs::soft_link(target, ctx.resolve(link)).map_err(io_err)?;
    Ok("linked".into())
}

/// Renames: `text` is FROM\nTO.
fn rename(a: TextArgs, ctx: &Context) -> Result<String, ToolError> {
    let (from, to) = a.text.split_once('\n').ok_or_else(|| ToolError::invalid("text is FROM\\nTO"))?;
    std::fs::rename(ctx.resolve(from), ctx.resolve(to)).map_err(io_err)?;
    Ok("renamed".into())
}

/// GETs the URL made of `text`'s two lines joined (a value the host never saw whole in the
/// arguments).
fn http_get_joined(a: TextArgs, _: &Context) -> Result<String, ToolError> {
    let (head, tail) = a.text.split_once('\n').ok_or_else(|| ToolError::invalid("text is HEAD\\nTAIL"))?;
    let resp = http::get(&format!("{head}{tail}"))?;
    Ok(format!("{} {}", resp.status, resp.text()))
}

fn http_get(a: UrlArgs, _: &Context) -> Result<String, ToolError> {
    let resp = http::get(&a.url)?;
    Ok(format!("{} {}", resp.status, resp.text()))
}

/// Sends a header carrying the WEATHER_API_KEY placeholder to any URL (to test stripping).
fn http_with_secret(a: UrlArgs, _: &Context) -> Result<String, ToolError> {
    let resp = http::Request::get(a.url).header("x-key", &secrets::placeholder("WEATHER_API_KEY")).send()?;
    Ok(format!("{} {}", resp.status, resp.text()))
}

/// Sends the WEATHER_API_KEY placeholder in the header the arguments name (`cookie`,
/// `x-forwarded-host`, ...), to see which headers the host fills.
fn http_with_secret_in(a: UrlHeaderArgs, _: &Context) -> Result<String, ToolError> {
    let resp = http::Request::get(a.url).header(&a.header, &secrets::placeholder("WEATHER_API_KEY")).send()?;
    Ok(format!("{} {}", resp.status, resp.text()))
}

fn env_var(a: NameArgs, _: &Context) -> Result<String, ToolError> {
    Ok(std::env::var(&a.name).unwrap_or_else(|e| format!("env: {e}")))
}

fn env_all(_: NoArgs, _: &Context) -> Result<String, ToolError> {
    Ok(std::env::vars().map(|(k, v)| format!("{k}={v}\n")).collect())
}

fn secret_exists(a: NameArgs, _: &Context) -> Result<String, ToolError> {
    Ok(secrets::exists(&a.name).to_string())
}

fn kv_get(a: NameArgs, _: &Context) -> Result<String, ToolError> {
    match kv::get(&a.name)? {
        Some(v) => Ok(String::from_utf8_lossy(&v).into_owned()),
        None => Ok("<none>".into()),
    }
}

fn kv_set(a: TextArgs, _: &Context) -> Result<String, ToolError> {
    let (k, v) = a.text.split_once('=').ok_or_else(|| ToolError::invalid("text is KEY=VALUE"))?;
    kv::set(k, v.as_bytes())?;
    Ok("stored".into())
}

#[derive(Deserialize, JsonSchema)]
struct SwapArgs {
    key: String,
    expected: Option<String>,
    new: Option<String>,
}

/// `compare-and-set`: "swapped" or "unchanged".
fn kv_swap(a: SwapArgs, _: &Context) -> Result<String, ToolError> {
    let swapped =
        kv::compare_and_set(&a.key, a.expected.as_deref().map(str::as_bytes), a.new.as_deref().map(str::as_bytes))?;
    Ok(if swapped { "swapped" } else { "unchanged" }.into())
}

#[derive(Deserialize, JsonSchema)]
struct CountArgs {
    key: String,
    delta: i64,
}

/// `increment`: the new value.
fn kv_count(a: CountArgs, _: &Context) -> Result<String, ToolError> {
    Ok(kv::increment(&a.key, a.delta)?.to_string())
}

#[derive(Deserialize, JsonSchema)]
struct PrefixArgs {
    prefix: String,
}

/// `list-with-values`: one `key=value` line each.
fn kv_list(a: PrefixArgs, _: &Context) -> Result<String, ToolError> {
    Ok(kv::list(&a.prefix)?.into_iter().map(|(k, v)| format!("{k}={}\n", String::from_utf8_lossy(&v))).collect())
}

#[derive(Deserialize, JsonSchema)]
struct FillArgs {
    key: String,
    bytes: u64,
}

/// Create `key` holding `bytes` zero bytes, if it is absent: "created" or "exists".
fn kv_fill(a: FillArgs, _: &Context) -> Result<String, ToolError> {
    let n = usize::try_from(a.bytes).map_err(|_| ToolError::invalid("too big"))?;
    Ok(if kv::create(&a.key, &vec![0u8; n])? { "created" } else { "exists" }.into())
}

fn spin(_: NoArgs, _: &Context) -> Result<String, ToolError> {
    let mut x: u64 = 0;
    loop {
        x = std::hint::black_box(x.wrapping_add(1));
    }
}

fn alloc(a: SizeArgs, _: &Context) -> Result<String, ToolError> {
    let n = usize::try_from(a.bytes).map_err(|_| ToolError::invalid("too big"))?;
    let v = vec![7u8; n];
    Ok(format!("allocated {}", std::hint::black_box(v).len()))
}

fn panic(a: TextArgs, _: &Context) -> Result<String, ToolError> {
    panic!("{}", a.text);
}

fn echo(a: TextArgs, _: &Context) -> Result<String, ToolError> {
    Ok(a.text)
}

fn big_output(a: SizeArgs, _: &Context) -> Result<String, ToolError> {
    Ok("x".repeat(usize::try_from(a.bytes).unwrap_or(0)))
}

/// What the last call of this instance was told, in the data segment.
static LEFT: std::sync::Mutex<String> = std::sync::Mutex::new(String::new());

/// The byte `leave_marks` fills the heap with.
const MARK: u8 = 0xA5;

/// Leave traces for a later call to find: `text` in a static, and a megabyte of heap filled
/// with a marker byte, never freed.
fn leave_marks(a: TextArgs, _: &Context) -> Result<String, ToolError> {
    *LEFT.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = a.text;
    std::mem::forget(vec![MARK; 1 << 20]);
    Ok("left".into())
}

/// Look for what an earlier call left: the static's text, and marker bytes in a fresh megabyte
/// of heap read before it is written.
#[allow(unsafe_code)]
fn find_marks(_: NoArgs, _: &Context) -> Result<String, ToolError> {
    let left = LEFT.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
    let layout = std::alloc::Layout::from_size_align(1 << 20, 8).map_err(|e| ToolError::invalid(e.to_string()))?;
    // SAFETY: the layout is not zero-sized; the bytes are only counted (every bit pattern is a
    // valid u8), then the block is freed with the layout it was allocated with.
    let marks = unsafe {
        let block = std::alloc::alloc(layout);
        if block.is_null() {
            return Err(ToolError::failed("out of memory"));
        }
        let bytes = std::slice::from_raw_parts(block, 1 << 20);
        let marks = bytes.iter().filter(|b| **b == MARK).count();
        std::alloc::dealloc(block, layout);
        marks
    };
    Ok(format!("static={left:?} marks={marks}"))
}

fn run(a: TextArgs, _: &Context) -> Result<String, ToolError> {
    let out = process::Command::new(a.text).run()?;
    Ok(format!("exit={:?}\n{}{}", out.exit_code, out.stdout, out.stderr))
}

export_tools!(
    read_path,
    write_path,
    symlink,
    rename,
    http_get,
    http_get_joined,
    http_with_secret,
    http_with_secret_in,
    env_var,
    env_all,
    secret_exists,
    kv_get,
    kv_set,
    kv_swap,
    kv_count,
    kv_list,
    kv_fill,
    spin,
    alloc,
    panic,
    echo,
    big_output,
    run,
    leave_marks,
    find_marks,
);
