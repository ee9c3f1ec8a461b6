//! Images for models: what a file or a peer's bytes really are, read from their first bytes,
//! whatever a name or a claimed media type says.

use base64::Engine as _;
use talaria_protocol::Image;

/// The largest image sent to a model (Anthropic's limit per image).
pub const MAX_IMAGE_BYTES: u64 = 5 * 1024 * 1024;

/// Why bytes are not an image a model takes. Each message is a clause about them ("it is ..."),
/// for the caller to put after its own words (which file, which peer).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImageError {
    /// Larger than [`MAX_IMAGE_BYTES`].
    #[error("it is larger than {} MiB", MAX_IMAGE_BYTES / 1024 / 1024)]
    TooLarge,
    /// Not a PNG, JPEG, GIF or WebP image, whatever its name or claimed media type says.
    #[error("it is not a PNG, JPEG, GIF or WebP image, whatever it is called")]
    Unsupported,
    /// A peer's data that is not base64.
    #[error("it is not base64 ({0})")]
    NotBase64(base64::DecodeError),
}

/// The media type `bytes` start like: PNG, JPEG, GIF or WebP, the kinds models take.
pub fn sniff(bytes: &[u8]) -> Option<&'static str> {
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if bytes.starts_with(&[0xff, 0xd8, 0xff]) {
        Some("image/jpeg")
    } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
        Some("image/gif")
    } else if bytes.len() > 12 && bytes.starts_with(b"RIFF") && &bytes[8..12] == b"WEBP" {
        Some("image/webp")
    } else {
        None
    }
}

/// "an image", or "N images".
pub fn counted(n: usize) -> String {
    if n == 1 { "an image".to_string() } else { format!("{n} images") }
}

/// `bytes` as an image, or why they are not one a model takes.
///
/// # Errors
/// [`ImageError::Unsupported`]: not a PNG, JPEG, GIF or WebP image; [`ImageError::TooLarge`]:
/// larger than [`MAX_IMAGE_BYTES`].
pub fn from_bytes(bytes: &[u8]) -> Result<Image, ImageError> {
    if bytes.len() as u64 > MAX_IMAGE_BYTES {
        return Err(ImageError::TooLarge);
    }
    let media_type = sniff(bytes).ok_or(ImageError::Unsupported)?;
    Ok(Image { media_type: media_type.into(), data: base64::engine::general_purpose::STANDARD.encode(bytes) })
}

/// An image a peer (an MCP server) sent as base64: decoded and checked, its media type read
/// from its bytes, never taken from the peer.
///
/// # Errors
/// [`ImageError::NotBase64`], or not an image [`from_bytes`] takes.
pub fn from_base64(data: &str) -> Result<Image, ImageError> {
    // A stray line break is not worth refusing an image for; anything else not base64 is.
    let data: String = data.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    if data.len() as u64 > MAX_IMAGE_BYTES / 3 * 4 + 4 {
        return Err(ImageError::TooLarge);
    }
    let bytes = base64::engine::general_purpose::STANDARD.decode(&data).map_err(ImageError::NotBase64)?;
    from_bytes(&bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::takes_images;

    #[test]
    fn vision_is_as_configured_else_guessed_from_the_name() {
        assert!(takes_images("openai/gpt-4o-mini", None) && !takes_images("llama3.2", None));
        assert!(takes_images("llama3.2", Some(true)) && !takes_images("claude-sonnet-4-5", Some(false)));
    }

    const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR";

    #[test]
    fn the_bytes_decide_the_type_not_the_name() {
        let b64 = base64::engine::general_purpose::STANDARD.encode(PNG);
        let image = from_base64(&b64).expect("a png");
        assert_eq!((image.media_type.as_str(), image.data.as_str()), ("image/png", b64.as_str()));
        let html = base64::engine::general_purpose::STANDARD.encode(b"<html><script>");
        assert_eq!(
            from_base64(&html).expect_err("html").to_string(),
            "it is not a PNG, JPEG, GIF or WebP image, whatever it is called"
        );
        assert!(from_base64("not base64!").expect_err("not base64").to_string().starts_with("it is not base64"));
        let huge = "A".repeat(8 * 1024 * 1024);
        assert_eq!(from_base64(&huge).expect_err("huge").to_string(), "it is larger than 5 MiB");
    }
}
