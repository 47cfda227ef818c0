//! The credential agentsh added to a request never comes back to the tree
//! in the response: an upstream that echoes request headers (a debug
//! endpoint, httpbin's `/headers`, an error page quoting the request)
//! would otherwise hand the tree the secret it was never given.
//!
//! Every response to a request that carries an injected secret is scanned
//! as it streams, headers and body (and the upstream's side of an upgraded
//! connection), for the secret as injected and in the forms an echo writes
//! it in (JSON-escaped, percent-encoded); each occurrence is overwritten
//! with `*` of the same length, so `Content-Length` and chunking stay
//! right. The request asks for `Accept-Encoding: identity`; a response
//! that comes compressed anyway cannot be scanned and is refused
//! ([`encoded`]).
//!
//! Why same-length: a response is relayed as it arrives (a clone's
//! packfile is hundreds of MiB); a different length would need the whole
//! body first. A match split between two reads is found: the end of a read
//! that begins a form of the secret waits for the next read; one of at
//! most three bytes goes after [`QUIET`] (a stream that pauses there is not
//! stalled), and the rest of a match, if it comes, is overwritten all the
//! same.
//!
//! Failure modes: none of its own; what it cannot scan (an encoded body)
//! is the caller's refusal. An upstream that transforms the secret
//! (hashes, reverses, encodes it otherwise) is not caught: it is trusted
//! with the secret, as the rule that sends it there says.

use bytes::Bytes;
use hyper::body::{Body as HttpBody, Frame};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// The byte strings to overwrite, and what is held back between reads.
#[derive(Debug, Clone)]
pub(super) struct Redactor {
    needles: Vec<Vec<u8>>,
    /// The longest needle's length, less one: held back at each read's end.
    keep: usize,
    /// The bytes a needle starts with: at any other byte no needle is
    /// compared (a response streams through here whole).
    firsts: [bool; 256],
    held: Vec<u8>,
    /// The last bytes already passed on (at most `keep`), scanned again
    /// with the next read: a match that began in bytes let go after a
    /// pause ([`Redactor::release`]) is overwritten in what follows.
    sent: Vec<u8>,
    /// Occurrences overwritten so far.
    pub found: u64,
}

/// The most held bytes [`Redactor::release`] lets go after a pause: at most
/// this many characters of a form of the secret can leave that way (the
/// rest is still overwritten); a longer held end waits for more data or
/// the stream's end (such a coincidence at a pause is about 2^-32).
const RELEASE_MAX: usize = 3;

/// The forms an echo may write `secret` in: as is, JSON-escaped, and
/// percent-encoded (each only where it differs).
fn forms(secret: &str) -> Vec<Vec<u8>> {
    let mut out = vec![secret.as_bytes().to_vec()];
    let json = serde_json::to_string(secret).unwrap_or_default();
    let json = json
        .strip_prefix('"')
        .and_then(|j| j.strip_suffix('"'))
        .unwrap_or(secret);
    // JSON may escape `/` too (`\/`, PHP and others).
    for j in [json.to_string(), json.replace('/', "\\/")] {
        out.push(j.into_bytes());
    }
    let mut pct = String::new();
    for b in secret.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            pct.push(char::from(b));
        } else {
            pct.push_str(&format!("%{b:02X}"));
        }
    }
    out.push(pct.to_ascii_lowercase().into_bytes());
    out.push(pct.into_bytes());
    out.sort();
    out.dedup();
    out
}

impl Redactor {
    /// For `secrets` (the values added to the request); `None` when there
    /// are none worth scanning for (empty values).
    pub fn new(secrets: &[String]) -> Option<Redactor> {
        let mut needles: Vec<Vec<u8>> = secrets
            .iter()
            .filter(|s| !s.is_empty())
            .flat_map(|s| forms(s))
            .collect();
        needles.sort();
        needles.dedup();
        let longest = needles.iter().map(Vec::len).max()?;
        let mut firsts = [false; 256];
        for n in &needles {
            firsts[usize::from(n[0])] = true;
        }
        Some(Redactor {
            needles,
            firsts,
            keep: longest - 1,
            held: Vec::new(),
            sent: Vec::new(),
            found: 0,
        })
    }

    /// Overwrites every whole occurrence in `buf`; how many.
    fn overwrite(&self, buf: &mut [u8]) -> u64 {
        let mut n = 0;
        let mut i = 0;
        while i < buf.len() {
            if !self.firsts[usize::from(buf[i])] {
                i += 1;
                continue;
            }
            let hit = self
                .needles
                .iter()
                .filter(|nd| buf[i..].starts_with(nd))
                .map(Vec::len)
                .max();
            match hit {
                Some(len) => {
                    buf[i..i + len].fill(b'*');
                    n += 1;
                    i += len;
                }
                None => i += 1,
            }
        }
        n
    }

    /// The next piece of the stream: what can be passed on now (all but
    /// the tail a match may still continue from: the longest end of it
    /// that begins a needle).
    pub fn push(&mut self, data: &[u8]) -> Vec<u8> {
        let at = self.sent.len();
        let mut buf = std::mem::take(&mut self.sent);
        buf.append(&mut self.held);
        buf.extend_from_slice(data);
        self.found += self.overwrite(&mut buf);
        // Never hold back what was already passed on.
        let hold = (1..=self.keep.min(buf.len() - at))
            .rev()
            .find(|&k| {
                let tail = &buf[buf.len() - k..];
                self.needles.iter().any(|n| n.starts_with(tail))
            })
            .unwrap_or(0);
        self.held = buf.split_off(buf.len() - hold);
        self.pass(buf, at)
    }

    /// `buf[at..]` is passed on; the last `keep` bytes of `buf` are kept
    /// as `sent`.
    fn pass(&mut self, buf: Vec<u8>, at: usize) -> Vec<u8> {
        let out = buf[at..].to_vec();
        self.sent = buf[buf.len().saturating_sub(self.keep)..].to_vec();
        out
    }

    /// Whether held bytes may go after [`QUIET`] without more data: there
    /// are some, and at most [`RELEASE_MAX`].
    pub fn releasable(&self) -> bool {
        !self.held.is_empty() && self.held.len() <= RELEASE_MAX
    }

    /// The held bytes, let go after [`QUIET`] without more data (see
    /// [`Redactor::releasable`]): they begin a needle, but the stream did
    /// not go on; if it does later, the rest of the match is overwritten.
    pub fn release(&mut self) -> Vec<u8> {
        let held = std::mem::take(&mut self.held);
        let mut buf = std::mem::take(&mut self.sent);
        let at = buf.len();
        buf.extend_from_slice(&held);
        self.pass(buf, at)
    }

    /// The end of the stream: what was held back.
    pub fn finish(&mut self) -> Vec<u8> {
        let mut buf = std::mem::take(&mut self.held);
        self.found += self.overwrite(&mut buf);
        buf
    }

    /// `value` with every occurrence overwritten (a header's value), and
    /// whether there was one.
    pub fn whole(&mut self, value: &[u8]) -> (Vec<u8>, bool) {
        let mut buf = value.to_vec();
        let n = self.overwrite(&mut buf);
        self.found += n;
        (buf, n > 0)
    }
}

/// How long held bytes wait for the rest of a possible match before they
/// go on (a stream that pauses mid-message: server-sent events, a
/// WebSocket's reply): an upstream that echoes the credential writes it
/// whole, not split around a pause.
pub(super) const QUIET: std::time::Duration = std::time::Duration::from_millis(200);

/// Why a response cannot be scanned: its body is encoded (`None`: it can).
pub(super) fn encoded(headers: &hyper::HeaderMap) -> Option<String> {
    // A transfer coding other than chunked (`gzip, chunked`) is a
    // compressed body too, once hyper has undone the chunking.
    let tokens = |name: hyper::header::HeaderName| {
        headers
            .get_all(name)
            .iter()
            .flat_map(|v| {
                String::from_utf8_lossy(v.as_bytes())
                    .split(',')
                    .map(|t| t.trim().to_ascii_lowercase())
                    .collect::<Vec<_>>()
            })
            .collect::<Vec<_>>()
    };
    let coding: Vec<String> = tokens(hyper::header::CONTENT_ENCODING)
        .into_iter()
        .chain(tokens(hyper::header::TRANSFER_ENCODING))
        .filter(|v| !v.is_empty() && v != "identity" && v != "chunked")
        .collect();
    (!coding.is_empty()).then(|| {
        format!(
            "the upstream answered a request carrying a credential agentsh added with a {} \
             body (asked for identity), which agentsh cannot check for that credential",
            coding.join(", ")
        )
    })
}

/// Called once with the number of occurrences overwritten, when the body
/// ends or is dropped.
pub(super) type OnEnd = Box<dyn FnOnce(u64) + Send + Sync>;

/// A response body with [`Redactor`] applied to its data.
pub(super) struct Redacted<B> {
    inner: B,
    r: Redactor,
    /// Trailers read while held bytes were still to be sent.
    trailers: Option<Frame<Bytes>>,
    ended: bool,
    on_end: Option<OnEnd>,
    /// Runs while bytes are held and the upstream is quiet.
    quiet: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<B> Redacted<B> {
    pub fn new(inner: B, r: Redactor, on_end: OnEnd) -> Redacted<B> {
        Redacted {
            inner,
            r,
            trailers: None,
            ended: false,
            on_end: Some(on_end),
            quiet: None,
        }
    }

    fn end(&mut self) {
        if let Some(f) = self.on_end.take() {
            f(self.r.found);
        }
    }

    /// The stream's end: the held bytes (scanned), then the trailers if
    /// any; the count is final.
    fn flush(&mut self) -> Option<Frame<Bytes>> {
        self.ended = true;
        let rest = self.r.finish();
        self.end();
        if rest.is_empty() {
            self.trailers.take()
        } else {
            Some(Frame::data(Bytes::from(rest)))
        }
    }
}

impl<B> Drop for Redacted<B> {
    fn drop(&mut self) {
        self.end();
    }
}

impl<B> HttpBody for Redacted<B>
where
    B: HttpBody<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = &mut *self;
        if this.ended {
            return Poll::Ready(this.trailers.take().map(Ok));
        }
        loop {
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Pending => {
                    if !this.r.releasable() {
                        return Poll::Pending;
                    }
                    let quiet = this
                        .quiet
                        .get_or_insert_with(|| Box::pin(tokio::time::sleep(QUIET)));
                    if quiet.as_mut().poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                    this.quiet = None;
                    let out = this.r.release();
                    return Poll::Ready(Some(Ok(Frame::data(Bytes::from(out)))));
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => {
                        this.quiet = None;
                        let out = this.r.push(&data);
                        if !out.is_empty() {
                            return Poll::Ready(Some(Ok(Frame::data(Bytes::from(out)))));
                        }
                    }
                    Err(trailers) => {
                        this.trailers = Some(trailers);
                        return Poll::Ready(this.flush().map(Ok));
                    }
                },
                Poll::Ready(None) => return Poll::Ready(this.flush().map(Ok)),
            }
        }
    }
}

/// An upgraded connection's two directions: the tree's bytes go on as
/// they are; the upstream's are scanned when `scan` is given.
pub(super) async fn tunnel<D, U>(mut down: D, mut up: U, scan: Option<(Redactor, OnEnd)>)
where
    D: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    U: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Some((mut r, on_end)) = scan else {
        let _ = tokio::io::copy_bidirectional(&mut down, &mut up).await;
        return;
    };
    let (mut dr, mut dw) = tokio::io::split(down);
    let (mut ur, mut uw) = tokio::io::split(up);
    let to_up = async {
        let _ = tokio::io::copy(&mut dr, &mut uw).await;
        let _ = uw.shutdown().await;
    };
    let to_down = async {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let read = ur.read(&mut buf);
            let got = if r.releasable() {
                match tokio::time::timeout(QUIET, read).await {
                    Ok(got) => got,
                    Err(_) => {
                        let held = r.release();
                        if dw.write_all(&held).await.is_err() {
                            break;
                        }
                        continue;
                    }
                }
            } else {
                read.await
            };
            let n = match got {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let out = r.push(&buf[..n]);
            if dw.write_all(&out).await.is_err() {
                break;
            }
        }
        let rest = r.finish();
        let _ = dw.write_all(&rest).await;
        let _ = dw.shutdown().await;
        r.found
    };
    let ((), found) = tokio::join!(to_up, to_down);
    on_end(found);
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "ghp_a/b+c";

    fn redacted_whole(r: &mut Redactor, chunks: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        for c in chunks {
            out.extend(r.push(c));
        }
        out.extend(r.finish());
        out
    }

    #[test]
    fn each_form_an_echo_writes_is_a_needle() {
        let f = forms(SECRET);
        for want in ["ghp_a/b+c", "ghp_a\\/b+c", "ghp_a%2Fb%2Bc", "ghp_a%2fb%2bc"] {
            assert!(f.contains(&want.as_bytes().to_vec()), "{want}: {f:?}");
        }
    }

    /// Every way a stream can be cut into two reads around the secret: it
    /// is found once, overwritten, and every other byte passes unchanged.
    #[test]
    fn a_secret_split_between_reads_anywhere_is_overwritten() {
        let text = format!("{{\"authorization\": \"Bearer {SECRET}\"}} and more");
        let want = text.replace(SECRET, &"*".repeat(SECRET.len()));
        for cut in 0..=text.len() {
            let mut r = Redactor::new(&[SECRET.to_string()]).unwrap();
            let (a, b) = text.as_bytes().split_at(cut);
            let out = redacted_whole(&mut r, &[a, b]);
            assert_eq!(String::from_utf8_lossy(&out), want, "cut at {cut}");
            assert_eq!(r.found, 1, "cut at {cut}");
        }
    }

    #[test]
    fn json_escaped_and_percent_encoded_echoes_are_overwritten() {
        let mut r = Redactor::new(&[SECRET.to_string()]).unwrap();
        let out = redacted_whole(
            &mut r,
            &[b"a ghp_a\\/b+c b ghp_a%2Fb%2Bc c ghp_a%2fb%2bc d"],
        );
        let out = String::from_utf8_lossy(&out).into_owned();
        assert!(!out.contains("ghp_"), "{out}");
        assert_eq!(r.found, 3, "{out}");
        assert!(out.starts_with("a *") && out.ends_with("* d"), "{out}");
    }

    /// Bytes that cannot begin the secret are never held: a stream that
    /// pauses after them is not stalled.
    #[test]
    fn only_an_end_that_begins_the_secret_is_held() {
        let mut r = Redactor::new(&[SECRET.to_string()]).unwrap();
        assert_eq!(r.push(b"data: {\"x\": 1}\n\n"), b"data: {\"x\": 1}\n\n");
        assert!(!r.releasable());
        assert_eq!(r.push(b"next gh"), b"next ");
        assert!(r.releasable());
        assert_eq!(r.release(), b"gh");
        assert_eq!(r.found, 0);
    }

    /// After a pause, at most three characters of the secret go; the rest,
    /// when it comes, is overwritten all the same; a longer held end is
    /// not let go at all.
    #[test]
    fn a_pause_inside_the_secret_lets_three_characters_go_at_most() {
        let mut r = Redactor::new(&[SECRET.to_string()]).unwrap();
        assert_eq!(r.push(b"x: gh"), b"x: ");
        assert_eq!(r.release(), b"gh");
        let rest = &SECRET.as_bytes()[2..];
        let out = [r.push(rest), r.push(b" end"), r.finish()].concat();
        assert_eq!(out, [&b"*".repeat(rest.len())[..], b" end"].concat());
        assert_eq!(r.found, 1);
        let mut r = Redactor::new(&[SECRET.to_string()]).unwrap();
        assert_eq!(r.push(b"x: ghp_"), b"x: ");
        assert!(!r.releasable(), "four held bytes would be let go");
    }

    #[test]
    fn a_header_value_is_overwritten_in_place() {
        let mut r = Redactor::new(&[SECRET.to_string()]).unwrap();
        let (v, hit) = r.whole(format!("Bearer {SECRET}").as_bytes());
        assert!(hit);
        assert_eq!(v, format!("Bearer {}", "*".repeat(SECRET.len())).as_bytes());
        assert!(Redactor::new(&[String::new()]).is_none());
    }

    #[test]
    fn an_encoded_body_is_named_and_identity_is_not() {
        let mut h = hyper::HeaderMap::new();
        assert!(encoded(&h).is_none());
        h.insert(hyper::header::CONTENT_ENCODING, "identity".parse().unwrap());
        assert!(encoded(&h).is_none());
        h.insert(hyper::header::TRANSFER_ENCODING, "chunked".parse().unwrap());
        assert!(encoded(&h).is_none());
        h.insert(
            hyper::header::TRANSFER_ENCODING,
            "gzip, chunked".parse().unwrap(),
        );
        assert!(encoded(&h).unwrap().contains("gzip"), "{:?}", encoded(&h));
        h.remove(hyper::header::TRANSFER_ENCODING);
        h.insert(hyper::header::CONTENT_ENCODING, "gzip".parse().unwrap());
        assert!(encoded(&h).unwrap().contains("gzip"), "{:?}", encoded(&h));
    }
}
