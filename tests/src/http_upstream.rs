//! A real HTTP(S) upstream for the egress proxy's tests: Python's
//! `http.server` on a loopback address, TLS with a certificate for a name
//! from a CA of the test's own (made with `openssl`), which logs every
//! request it gets (method, path, Host, Authorization, body length) as
//! JSON lines, answers JSON describing what it saw (never the
//! Authorization value, but on a path ending in `/headers`, which echoes
//! every request header as httpbin's `/headers` does), and serves Git's smart HTTP under `/git/` through
//! `git http-backend` (pushes enabled: only the proxy can refuse one).

use serde_json::Value;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const SERVER: &str = r#"
import http.server, json, os, ssl, subprocess, sys
log_path, mode, ip, port, cert, key, repos = sys.argv[1:8]
log = open(log_path, "a", buffering=1)

def chunked(r):
    out = b""
    while True:
        n = int(r.readline().split(b";")[0].strip(), 16)
        if n == 0:
            while r.readline() not in (b"\r\n", b"\n", b""):
                pass
            return out
        out += r.read(n)
        r.readline()

class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    def log_message(self, *a):
        pass
    def any(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            body = chunked(self.rfile)
        else:
            n = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(n) if n else b""
        log.write(json.dumps({"method": self.command, "path": self.path,
            "host": self.headers.get("Host"),
            "authorization": self.headers.get("Authorization"), "len": len(body)}) + "\n")
        if self.path.startswith("/git/"):
            return self.git(body)
        if self.headers.get("Upgrade") in ("echo", "websocket", "h2c"):
            self.send_response(101)
            self.send_header("Connection", "Upgrade")
            self.send_header("Upgrade", self.headers.get("Upgrade"))
            self.end_headers()
            self.wfile.flush()
            line = self.rfile.readline()
            self.wfile.write(b"pong:" + line)
            self.wfile.flush()
            self.close_connection = True
            return
        if self.path.endswith("/headers"):
            # httpbin's /headers: the request's headers, echoed.
            out = json.dumps({"headers": dict(self.headers.items())}).encode()
        else:
            out = json.dumps({"method": self.command, "path": self.path, "len": len(body),
                "saw_authorization": self.headers.get("Authorization") is not None}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(out)
    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do_PATCH = any

    def git(self, body):
        path, _, query = self.path[4:].partition("?")
        env = dict(os.environ, GIT_PROJECT_ROOT=repos, GIT_HTTP_EXPORT_ALL="1",
            PATH_INFO=path, QUERY_STRING=query, REQUEST_METHOD=self.command,
            CONTENT_TYPE=self.headers.get("Content-Type", ""), CONTENT_LENGTH=str(len(body)),
            HTTP_CONTENT_ENCODING=self.headers.get("Content-Encoding", ""),
            GIT_PROTOCOL=self.headers.get("Git-Protocol", ""), REMOTE_USER="tester",
            REMOTE_ADDR="127.0.0.1")
        p = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True)
        sep = b"\r\n\r\n" if b"\r\n\r\n" in p.stdout else b"\n\n"
        head, _, rest = p.stdout.partition(sep)
        status, headers = 200, []
        for line in head.decode().splitlines():
            k, _, v = line.partition(":")
            if k.lower() == "status":
                status = int(v.split()[0])
            elif k:
                headers.append((k, v.strip()))
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(rest)))
        self.end_headers()
        self.wfile.write(rest)

s = http.server.ThreadingHTTPServer((ip, int(port)), H)
if mode == "tls":
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    ctx.set_alpn_protocols(["http/1.1"])
    s.socket = ctx.wrap_socket(s.socket, server_side=True)
print("ready", flush=True)
s.serve_forever()
"#;

const H2_SERVER: &str = r#"
const http2 = require("http2"), fs = require("fs");
const [log, ip, port, cert, key] = process.argv.slice(1);
const server = http2.createSecureServer({cert: fs.readFileSync(cert), key: fs.readFileSync(key), allowHTTP1: true});
server.on("request", (req, res) => {
  let n = 0;
  req.on("data", (d) => { n += d.length; });
  req.on("end", () => {
    fs.appendFileSync(log, JSON.stringify({method: req.method, path: req.url,
      host: req.headers[":authority"] || req.headers.host,
      authorization: req.headers.authorization || null, len: n, version: req.httpVersion}) + "\n");
    const out = JSON.stringify({method: req.method, path: req.url, len: n, version: req.httpVersion,
      saw_authorization: req.headers.authorization !== undefined});
    res.writeHead(200, {"content-type": "application/json"});
    res.end(out);
  });
});
server.listen(Number(port), ip, () => console.log("ready"));
"#;

/// How the upstream speaks.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// HTTP/1.1 over TLS (Python).
    Tls,
    /// HTTP/1.1 in the clear (Python).
    Plain,
    /// HTTP/2 (and HTTP/1.1) over TLS, by ALPN (node).
    H2,
}

/// A running upstream.
pub struct HttpUpstream {
    child: Child,
    pub ip: Ipv4Addr,
    pub port: u16,
    log: PathBuf,
    /// The test CA's certificate (what the proxy must trust for it).
    pub ca: PathBuf,
    /// Bare repositories served under `/git/`.
    pub repos: PathBuf,
}

fn run(dir: &Path, args: &[&str]) {
    let out = Command::new(args[0])
        .args(&args[1..])
        .current_dir(dir)
        .output()
        .expect("run a setup command");
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `program`, or the original of `path` where `agentsh shim install
/// --programs` stood the shim in for it (a scenario that installed the
/// Modal recipe in this root): the upstream is the test's, started outside
/// every tree, not an SDK's command, and must not wait for a server.
fn unshimmed(program: &str, path: &str) -> PathBuf {
    let real = std::fs::canonicalize(path).ok().and_then(|own| {
        own.file_name()
            .map(|n| Path::new(agentsh_proto::install::PROGRAMS_DIR).join(n))
    });
    match real {
        Some(r) if r.exists() => r,
        _ => program.into(),
    }
}

impl HttpUpstream {
    /// Starts on `ip` (a free port), `tls` with a certificate for `name`;
    /// its files in `dir`.
    pub fn start(dir: &Path, ip: Ipv4Addr, name: &str, tls: bool) -> HttpUpstream {
        HttpUpstream::start_kind(dir, ip, name, if tls { Kind::Tls } else { Kind::Plain })
    }

    /// Starts one of `kind`.
    pub fn start_kind(dir: &Path, ip: Ipv4Addr, name: &str, kind: Kind) -> HttpUpstream {
        std::fs::create_dir_all(dir).expect("upstream dir");
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        let mut a = vec!["openssl", "req", "-x509"];
        a.extend(ec);
        a.extend([
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=upstream test CA",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ]);
        run(dir, &a);
        let mut a = vec!["openssl", "req"];
        a.extend(ec);
        let subj = format!("/CN={name}");
        a.extend(["-keyout", "leaf.key", "-out", "leaf.csr", "-subj", &subj]);
        run(dir, &a);
        std::fs::write(
            dir.join("leaf.ext"),
            format!("subjectAltName=DNS:{name}\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"),
        )
        .expect("ext");
        run(
            dir,
            &[
                "openssl",
                "x509",
                "-req",
                "-in",
                "leaf.csr",
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                "leaf.pem",
                "-days",
                "2",
                "-extfile",
                "leaf.ext",
            ],
        );
        let repos = dir.join("repos");
        std::fs::create_dir_all(&repos).expect("repos");
        let port = (0..50)
            .find_map(|_| {
                let l = std::net::TcpListener::bind((ip, 0)).ok()?;
                Some(l.local_addr().ok()?.port())
            })
            .expect("a free port");
        let log = dir.join("requests.jsonl");
        let _ = std::fs::remove_file(&log);
        let mut cmd = if kind == Kind::H2 {
            let mut c = Command::new(unshimmed("node", "/usr/bin/node"));
            c.arg("-e")
                .arg(H2_SERVER)
                .arg(&log)
                .arg(ip.to_string())
                .arg(port.to_string())
                .arg(dir.join("leaf.pem"))
                .arg(dir.join("leaf.key"));
            c
        } else {
            let mut c = Command::new(unshimmed("/usr/bin/python3", "/usr/bin/python3"));
            c.arg("-c")
                .arg(SERVER)
                .arg(&log)
                .arg(if kind == Kind::Tls { "tls" } else { "plain" })
                .arg(ip.to_string())
                .arg(port.to_string())
                .arg(dir.join("leaf.pem"))
                .arg(dir.join("leaf.key"))
                .arg(&repos);
            c
        };
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the upstream");
        let mut line = String::new();
        let out = child.stdout.take().expect("stdout");
        std::io::BufRead::read_line(&mut std::io::BufReader::new(out), &mut line)
            .expect("the upstream's ready line");
        assert_eq!(line.trim(), "ready", "the upstream did not start");
        HttpUpstream {
            child,
            ip,
            port,
            log,
            ca: dir.join("ca.pem"),
            repos,
        }
    }

    /// Every request it got so far.
    pub fn requests(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Every request, once one for `path` has arrived (requests are logged
    /// in order on their connection; the test sends that one last).
    pub fn requests_until(&self, path: &str) -> Vec<Value> {
        let end = Instant::now() + Duration::from_secs(60);
        loop {
            let r = self.requests();
            if r.iter().any(|x| x["path"] == path) {
                return r;
            }
            assert!(Instant::now() < end, "no request for {path}: {r:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for HttpUpstream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
