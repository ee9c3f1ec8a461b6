"""A FastMCP server (PyPI `fastmcp`, pinned in tests/e2e/mcp.rs and .ci/run) whose one tool
returns an image, for tests/e2e/mcp.rs.

    python image_server.py

Serves over stdio. `tiny_png` answers with two content parts: a 2x2 red PNG (fastmcp's `Image`
helper, which sends it as MCP `ImageContent`, base64 `image/png`) and the text "a red square".
The test compares the base64 the model is sent with `TINY_PNG` below, which it reads from this
file, so the two cannot drift apart.
"""

import base64

from fastmcp import FastMCP
from fastmcp.utilities.types import Image

# A valid 2x2 PNG, 8-bit RGB, every pixel #ff0000 (73 bytes).
TINY_PNG = "iVBORw0KGgoAAAANSUhEUgAAAAIAAAACCAIAAAD91JpzAAAAEElEQVR42mP4z8AARAwQCgAf7gP9Y167WwAAAABJRU5ErkJggg=="

mcp = FastMCP("image-server")


@mcp.tool(annotations={"readOnlyHint": True})
def tiny_png() -> list:
    """A tiny picture: a 2x2 red square."""
    return [Image(data=base64.b64decode(TINY_PNG), format="png"), "a red square"]


if __name__ == "__main__":
    mcp.run(transport="stdio", show_banner=False)
