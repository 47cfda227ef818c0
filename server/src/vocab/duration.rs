//! Durations as the config and a `limits:` document write them: "10s",
//! "500ms", "2m" or a bare number of seconds.
//!
//! Failure modes: text that is not one of those forms is `None`; the caller
//! names the key in its error.

/// Parses "10s", "500ms", "2m" or a bare number of seconds.
pub fn parse_duration(text: &str) -> Option<std::time::Duration> {
    let t = text.trim();
    let (num, scale) = if let Some(n) = t.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60.0)
    } else {
        (t, 1.0)
    };
    let v: f64 = num.trim().parse().ok()?;
    std::time::Duration::try_from_secs_f64(v * scale).ok()
}
