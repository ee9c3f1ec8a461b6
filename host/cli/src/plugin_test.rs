//! `talaria plugin test`: run a plugin's tools in the real sandbox (being written).
