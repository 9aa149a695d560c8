//! A fault proxy that speaks RESP, for feeding the client replies no sane
//! server sends, and a watch on panics anywhere in a test's tasks.
//!
//! [`Rewriter`] reads every request and every reply as RESP frames and
//! pairs each reply with its request (replies come back in request order
//! on a connection). A [`Rule`] picks requests ([`Matcher`]) and answers
//! them with [`Garbage`] instead of the server's reply, once or every time,
//! on any connection or one of them (in accept order). The server still
//! runs the request: only its answer is replaced. A connection that starts
//! pub/sub (or replication) is passed through untouched from then on, its
//! replies no longer pairing with its requests.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What a client gets instead of the server's reply.
#[derive(Clone, Debug)]
pub enum Garbage {
    /// `$-1`: a nil bulk string.
    Nil,
    /// `*-1`: a nil array.
    NilArray,
    /// `:<n>`.
    Integer(i64),
    /// `+<text>`: a status.
    Status(&'static str),
    /// `$<len> <text>`: a bulk string.
    Bulk(&'static str),
    /// `-<text>`: an error.
    Error(&'static str),
    /// `*<n>` and the elements (empty, too short, of the wrong types ...).
    Array(Vec<Garbage>),
    /// An array that announces more elements than come, after which the
    /// connection closes, as a reply cut off mid-way.
    Truncated,
    /// No reply at all: the connection closes after the server ran the
    /// request (a lost reply).
    Lost,
}

impl Garbage {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Garbage::Nil => out.extend_from_slice(b"$-1\r\n"),
            Garbage::NilArray => out.extend_from_slice(b"*-1\r\n"),
            Garbage::Integer(n) => out.extend_from_slice(format!(":{n}\r\n").as_bytes()),
            Garbage::Status(s) => out.extend_from_slice(format!("+{s}\r\n").as_bytes()),
            Garbage::Bulk(s) => {
                out.extend_from_slice(format!("${}\r\n{s}\r\n", s.len()).as_bytes())
            }
            Garbage::Error(s) => out.extend_from_slice(format!("-{s}\r\n").as_bytes()),
            Garbage::Array(items) => {
                out.extend_from_slice(format!("*{}\r\n", items.len()).as_bytes());
                for item in items {
                    item.encode(out);
                }
            }
            Garbage::Truncated => out.extend_from_slice(b"*3\r\n:1\r\n"),
            Garbage::Lost => {}
        }
    }

    /// Whether the connection closes after it.
    fn closes(&self) -> bool {
        matches!(self, Garbage::Truncated | Garbage::Lost)
    }
}

/// Replies of every shape a script's reply could wrongly take, the
/// connection staying open (see [`Garbage::Truncated`] and
/// [`Garbage::Lost`] for the others).
pub fn shapes() -> Vec<Garbage> {
    use Garbage::*;
    vec![
        Nil,
        NilArray,
        Integer(-7),
        Integer(i64::MAX),
        Integer(i64::MIN),
        Status("OK"),
        Bulk("not a number"),
        Bulk(":-1e300"),
        Bulk(":nan"),
        Error("ERR garbage"),
        Array(vec![]),
        Array(vec![Integer(1)]),
        Array(vec![Bulk("x"), Nil, Array(vec![])]),
        Array(vec![Integer(-1), Integer(-1), Integer(-1), Integer(-1)]),
        Array(vec![Integer(1), Integer(i64::MAX), Integer(i64::MAX)]),
    ]
}

/// Every shape of [`shapes`], then a cut-off reply and a lost one.
pub fn every() -> Vec<Garbage> {
    let mut all = shapes();
    all.extend([Garbage::Truncated, Garbage::Lost]);
    all
}

/// One request as the proxy saw it.
pub struct Request {
    /// The connection it came on, in accept order.
    pub connection: usize,
    /// The command and its arguments.
    pub args: Vec<Vec<u8>>,
}

impl Request {
    /// The command's name, upper case.
    pub fn command(&self) -> String {
        self.args
            .first()
            .map(|c| String::from_utf8_lossy(c).to_ascii_uppercase())
            .unwrap_or_default()
    }

    /// Whether one of its arguments is `arg`.
    pub fn has_arg(&self, arg: &str) -> bool {
        self.args.iter().skip(1).any(|a| a == arg.as_bytes())
    }
}

/// Picks requests.
pub type Matcher = Arc<dyn Fn(&Request) -> bool + Send + Sync>;

/// Requests of `command`.
pub fn command(command: &'static str) -> Matcher {
    Arc::new(move |r: &Request| r.command() == command)
}

/// Requests of `command` with `arg` among their arguments (a key).
pub fn command_on(command: &'static str, arg: impl Into<String>) -> Matcher {
    let arg = arg.into();
    Arc::new(move |r: &Request| r.command() == command && r.has_arg(&arg))
}

/// Scripts (`EVALSHA`, `EVAL`) with `key` among their arguments.
pub fn script_on(key: impl Into<String>) -> Matcher {
    let key = key.into();
    Arc::new(move |r: &Request| matches!(&*r.command(), "EVALSHA" | "EVAL") && r.has_arg(&key))
}

/// A request pattern, what to answer it with, and how often.
struct Rule {
    matcher: Matcher,
    garbage: Garbage,
    /// `None`: every time.
    times: Option<usize>,
    /// `None`: on every connection.
    connection: Option<usize>,
}

#[derive(Default)]
struct State {
    rules: Mutex<Vec<Rule>>,
    stalled: tokio::sync::watch::Sender<bool>,
    connections: Mutex<Vec<Arc<AtomicBool>>>,
    /// Every request seen (command and arguments, as text).
    seen: Mutex<Vec<(usize, Vec<String>)>>,
    /// The replies replaced so far: the request, and what the server said.
    replaced: Mutex<Vec<(String, String)>>,
}

/// A RESP-aware proxy in front of a server (see the module's text).
pub struct Rewriter {
    pub port: u16,
    state: Arc<State>,
}

impl Rewriter {
    pub async fn start(upstream: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(State::default());
        let shared = state.clone();
        tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let raw = Arc::new(AtomicBool::new(false));
                let index = {
                    let mut connections = shared.connections.lock();
                    connections.push(raw.clone());
                    connections.len() - 1
                };
                let state = shared.clone();
                tokio::spawn(async move {
                    let Ok(outbound) = TcpStream::connect(("127.0.0.1", upstream)).await else {
                        return;
                    };
                    pump(inbound, outbound, &state, index, &raw).await;
                });
            }
        });
        Rewriter { port, state }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Answers the next request `matcher` picks with `garbage`.
    pub fn rewrite(&self, matcher: Matcher, garbage: Garbage) {
        self.add(matcher, garbage, Some(1), None);
    }

    /// Answers every request `matcher` picks with `garbage`, until `clear`.
    pub fn rewrite_every(&self, matcher: Matcher, garbage: Garbage) {
        self.add(matcher, garbage, None, None);
    }

    /// As `rewrite`, on the `connection`-th accepted connection only.
    pub fn rewrite_on(&self, connection: usize, matcher: Matcher, garbage: Garbage) {
        self.add(matcher, garbage, Some(1), Some(connection));
    }

    fn add(
        &self,
        matcher: Matcher,
        garbage: Garbage,
        times: Option<usize>,
        connection: Option<usize>,
    ) {
        self.state.rules.lock().push(Rule {
            matcher,
            garbage,
            times,
            connection,
        });
    }

    /// Drops every rule not yet used up.
    pub fn clear(&self) {
        self.state.rules.lock().clear();
    }

    /// Rules not used up yet.
    pub fn pending(&self) -> usize {
        self.state.rules.lock().len()
    }

    /// Holds back every reply (requests still go through).
    pub fn stall_replies(&self) {
        self.state.stalled.send_replace(true);
    }

    pub fn resume_replies(&self) {
        self.state.stalled.send_replace(false);
    }

    /// How many requests `matcher` picks among those seen so far.
    pub fn seen(&self, matcher: &Matcher) -> usize {
        self.state
            .seen
            .lock()
            .iter()
            .filter(|(connection, args)| {
                matcher(&Request {
                    connection: *connection,
                    args: args.iter().map(|a| a.clone().into_bytes()).collect(),
                })
            })
            .count()
    }

    /// The replies replaced so far: (request, the server's reply).
    pub fn replaced(&self) -> Vec<(String, String)> {
        self.state.replaced.lock().clone()
    }

    pub fn connections(&self) -> usize {
        self.state.connections.lock().len()
    }
}

/// The length of the RESP frame at the start of `buf`, if it is complete.
fn frame_len(buf: &[u8]) -> Option<usize> {
    let line_end = buf.windows(2).position(|w| w == b"\r\n")?;
    let line = std::str::from_utf8(&buf[1..line_end]).ok()?;
    let header = line_end + 2;
    match buf[0] {
        b'+' | b'-' | b':' | b'_' | b'#' | b',' | b'(' => Some(header),
        b'$' | b'=' | b'!' => {
            let n: i64 = line.parse().ok()?;
            if n < 0 {
                return Some(header);
            }
            let end = header + n as usize + 2;
            (buf.len() >= end).then_some(end)
        }
        b'*' | b'~' | b'>' | b'%' | b'|' => {
            let n: i64 = line.parse().ok()?;
            let n = if matches!(buf[0], b'%' | b'|') {
                2 * n
            } else {
                n
            };
            let mut at = header;
            for _ in 0..n.max(0) {
                at += frame_len(&buf[at..])?;
            }
            Some(at)
        }
        // An inline command: one line.
        _ => Some(header),
    }
}

/// A request frame's command and arguments.
fn request_args(frame: &[u8]) -> Vec<Vec<u8>> {
    if frame.first() != Some(&b'*') {
        return frame
            .split(|b| *b == b' ' || *b == b'\r' || *b == b'\n')
            .filter(|t| !t.is_empty())
            .map(<[u8]>::to_vec)
            .collect();
    }
    let mut args = vec![];
    let mut at = frame.windows(2).position(|w| w == b"\r\n").unwrap_or(0) + 2;
    while at < frame.len() {
        let Some(len) = frame_len(&frame[at..]) else {
            break;
        };
        let item = &frame[at..at + len];
        if item.first() == Some(&b'$') {
            let start = item.windows(2).position(|w| w == b"\r\n").unwrap_or(0) + 2;
            args.push(item[start..item.len().saturating_sub(2)].to_vec());
        }
        at += len;
    }
    args
}

/// Whether a request turns its connection into something other than
/// request-reply pairs (pub/sub, replication).
fn leaves_request_reply(command: &str) -> bool {
    matches!(
        command,
        "SUBSCRIBE" | "SSUBSCRIBE" | "PSUBSCRIBE" | "MONITOR" | "REPLCONF" | "PSYNC" | "SYNC"
    )
}

async fn pump(
    inbound: TcpStream,
    outbound: TcpStream,
    state: &State,
    index: usize,
    raw: &AtomicBool,
) {
    let (mut in_r, mut in_w) = inbound.into_split();
    let (mut out_r, mut out_w) = outbound.into_split();
    // Requests sent, in order, whose replies have not come back yet.
    let queue: Mutex<std::collections::VecDeque<Request>> = Mutex::default();
    let requests = async {
        let mut buf: Vec<u8> = vec![];
        let mut chunk = vec![0u8; 64 * 1024];
        loop {
            let n = match in_r.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            if raw.load(Ordering::SeqCst) {
                if out_w.write_all(&chunk[..n]).await.is_err() {
                    return;
                }
                continue;
            }
            buf.extend_from_slice(&chunk[..n]);
            let mut sent = 0;
            while let Some(len) = frame_len(&buf[sent..]) {
                let args = request_args(&buf[sent..sent + len]);
                let request = Request {
                    connection: index,
                    args,
                };
                let command = request.command();
                state.seen.lock().push((
                    index,
                    request
                        .args
                        .iter()
                        .map(|a| String::from_utf8_lossy(a).into_owned())
                        .collect(),
                ));
                sent += len;
                if leaves_request_reply(&command) {
                    raw.store(true, Ordering::SeqCst);
                    break;
                }
                queue.lock().push_back(request);
            }
            // Everything after a switch to pass-through goes on as it is.
            if raw.load(Ordering::SeqCst) {
                sent = buf.len();
            }
            if out_w.write_all(&buf[..sent]).await.is_err() {
                return;
            }
            buf.drain(..sent);
        }
    };
    let replies = async {
        let mut stall = state.stalled.subscribe();
        let mut buf: Vec<u8> = vec![];
        let mut chunk = vec![0u8; 64 * 1024];
        loop {
            let n = match out_r.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            buf.extend_from_slice(&chunk[..n]);
            if stall.wait_for(|stalled| !stalled).await.is_err() {
                return;
            }
            let mut out = vec![];
            let mut close = false;
            loop {
                if raw.load(Ordering::SeqCst) && queue.lock().is_empty() {
                    out.append(&mut buf);
                    break;
                }
                let Some(len) = frame_len(&buf) else { break };
                let reply: Vec<u8> = buf.drain(..len).collect();
                let Some(request) = queue.lock().pop_front() else {
                    out.extend_from_slice(&reply);
                    continue;
                };
                match replacement(state, &request, &reply) {
                    Some(garbage) => {
                        garbage.encode(&mut out);
                        if garbage.closes() {
                            close = true;
                            break;
                        }
                    }
                    None => out.extend_from_slice(&reply),
                }
            }
            if in_w.write_all(&out).await.is_err() || close {
                return;
            }
        }
    };
    // Whichever direction ends first closes the connection.
    tokio::select! {
        _ = requests => {}
        _ = replies => {}
    }
}

/// The garbage a rule gives in place of `reply` to `request`, if any. A
/// script the server does not have cached yet (`NOSCRIPT`) did not run, and
/// its client sends it again at once: that reply is left alone.
fn replacement(state: &State, request: &Request, reply: &[u8]) -> Option<Garbage> {
    if reply.starts_with(b"-NOSCRIPT") {
        return None;
    }
    let mut rules = state.rules.lock();
    let at = rules.iter().position(|rule| {
        rule.connection.is_none_or(|c| c == request.connection) && (rule.matcher)(request)
    })?;
    let garbage = rules[at].garbage.clone();
    if let Some(times) = &mut rules[at].times {
        *times -= 1;
        if *times == 0 {
            rules.remove(at);
        }
    }
    state.replaced.lock().push((
        request
            .args
            .iter()
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect::<Vec<_>>()
            .join(" "),
        String::from_utf8_lossy(reply).into_owned(),
    ));
    Some(garbage)
}

/// Panics recorded by the hook [`watch_panics`] installs: (thread, message).
fn panics() -> &'static Mutex<Vec<(String, String)>> {
    static PANICS: OnceLock<Mutex<Vec<(String, String)>>> = OnceLock::new();
    PANICS.get_or_init(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let thread = std::thread::current().name().unwrap_or("?").to_string();
            let message = match info.payload().downcast_ref::<&str>() {
                Some(s) => s.to_string(),
                None => info
                    .payload()
                    .downcast_ref::<String>()
                    .cloned()
                    .unwrap_or_default(),
            };
            let at = info
                .location()
                .map(|l| format!("{}:{}", l.file(), l.line()))
                .unwrap_or_default();
            if let Some(record) = PANICS.get() {
                record.lock().push((thread, format!("{message} at {at}")));
            }
            default(info);
        }));
        Mutex::default()
    })
}

/// Records every panic from now on, in any task of the calling test (its
/// thread: the tests here run on current-thread runtimes, which run the
/// tasks they spawn on that thread) or of a tokio worker.
pub struct PanicWatch {
    thread: String,
    from: usize,
}

/// Starts watching for panics (see [`PanicWatch`]).
pub fn watch_panics() -> PanicWatch {
    let record = panics();
    PanicWatch {
        thread: std::thread::current().name().unwrap_or("?").to_string(),
        from: record.lock().len(),
    }
}

impl PanicWatch {
    /// The panics seen since the watch started.
    pub fn seen(&self) -> Vec<String> {
        panics().lock()[self.from..]
            .iter()
            .filter(|(thread, _)| *thread == self.thread || thread.starts_with("tokio-"))
            .map(|(thread, message)| format!("[{thread}] {message}"))
            .collect()
    }

    /// Fails the test if anything panicked since the watch started.
    pub fn assert_none(&self) {
        let seen = self.seen();
        assert!(seen.is_empty(), "panicked: {seen:#?}");
    }
}
