//! Bulk transfer: where the bytes of `xtcp send` come from and where the
//! bytes of `xtcp recv` go.
//!
//! A [`Source`] fills the send buffer of a connection, a [`Sink`] drains its
//! receive buffer. Both run on a worker's hot path, so neither allocates,
//! locks or blocks there:
//!
//! - [`Source::Pattern`] / [`Sink::Verify`] generate and check a seeded
//!   pseudo-random stream ([`pattern_fill`]) in place, no I/O at all;
//! - [`Source::Zeros`] costs nothing once a send-buffer frame holds zeros;
//! - [`Source::File`] reads a regular file straight into the send buffer's
//!   frames with `preadv2(RWF_NOWAIT)` (the one copy, from the page cache,
//!   that a read cannot avoid); data not in the page cache yet is asked for
//!   with `posix_fadvise(WILLNEED)` and read on a later turn, so the worker
//!   never waits for a disk;
//! - [`Source::Pipe`] / [`Sink::Pipe`] exchange fixed-size chunks with an I/O
//!   thread ([`spawn_reader`], [`spawn_writer`]) over bounded lock-free
//!   channels; the chunks are allocated once and recycled, and a full or
//!   empty channel only means "not now" (TCP flow control does the rest);
//! - [`Source::Empty`] / [`Sink::Discard`] send nothing / count and drop.
//!
//! A writer's chunk goes to its thread when it is full, or once it has held
//! bytes for [`FLUSH_AFTER`] (the connection's turn is timed for it): a
//! slow stream's bytes reach the output as they come, not at its end.
//!
//! When a connection ends (FIN, RST, timeout, or the engine stopping) the
//! worker hands its sink what is left in TCP's receive buffer and ends the
//! stream with [`Sink::close`], which waits for room in the pipe: every
//! byte xtcp acknowledged reaches the writer thread, which opens its output
//! only when the first bytes (or the end of a stream) arrive, so a run in
//! which no connection came leaves the output untouched.

use std::io::{self, Read, Write};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TryRecvError, bounded};

/// Bytes of one pipe chunk.
pub const CHUNK_LEN: usize = 256 * 1024;
/// Chunks per pipe (the pipe holds at most this many × [`CHUNK_LEN`]).
pub const CHUNKS: usize = 16;
/// How long a writer's chunk holds bytes before it goes to the writer part
/// full. A stream faster than a chunk in this time (about 200 Mbit/s)
/// fills its chunks first; a slower one's bytes are written within about
/// this of their arrival, at most one part-full chunk per this time.
pub const FLUSH_AFTER: Duration = Duration::from_millis(10);

/// The byte at `offset` of the pattern stream `seed` is byte `offset % 8`
/// (little-endian) of word `offset / 8`: a multiply-xorshift of the index,
/// cheap enough to generate at tens of Gbit/s.
#[inline(always)]
fn word(seed: u64, index: u64) -> u64 {
    let z = (index ^ seed).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z ^ (z >> 29)
}

/// Writes bytes `offset..offset + buf.len()` of the pattern stream `seed`
/// into `buf`. The stream is the same on every machine (little-endian words).
pub fn pattern_fill(seed: u64, offset: u64, buf: &mut [u8]) {
    let mut o = offset;
    let mut b = &mut buf[..];
    // Leading partial word.
    while !o.is_multiple_of(8) && !b.is_empty() {
        b[0] = word(seed, o / 8).to_le_bytes()[(o % 8) as usize];
        b = &mut b[1..];
        o += 1;
    }
    let mut chunks = b.chunks_exact_mut(8);
    for c in &mut chunks {
        c.copy_from_slice(&word(seed, o / 8).to_le_bytes());
        o += 8;
    }
    let rest = chunks.into_remainder();
    if !rest.is_empty() {
        let w = word(seed, o / 8).to_le_bytes();
        let n = rest.len();
        rest.copy_from_slice(&w[..n]);
    }
}

/// Checks `buf` against the pattern at `offset`; returns the stream offset
/// of the first byte that differs.
pub fn pattern_check(seed: u64, offset: u64, buf: &[u8]) -> Option<u64> {
    let mut tmp = [0u8; 512];
    let mut done = 0;
    while done < buf.len() {
        let n = (buf.len() - done).min(tmp.len());
        pattern_fill(seed, offset + done as u64, &mut tmp[..n]);
        if tmp[..n] != buf[done..done + n] {
            let i = (0..n).find(|&i| tmp[i] != buf[done + i]).unwrap_or(0);
            return Some(offset + (done + i) as u64);
        }
        done += n;
    }
    None
}

/// A chunk of a pipe: `buf[..len]` is data.
#[derive(Debug)]
pub struct Chunk {
    buf: Box<[u8]>,
    len: usize,
}

/// An I/O error that stays `Copy` (it travels in [`Produced`] and the
/// reports): the OS's error number where there is one, whose message it
/// then gives ("Input/output error (os error 5)"), else the kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IoFailure {
    kind: io::ErrorKind,
    os: Option<i32>,
    /// Words of xtcp's own, where it found the failure itself.
    what: Option<&'static str>,
}

impl IoFailure {
    /// Its kind.
    pub fn kind(&self) -> io::ErrorKind {
        self.kind
    }

    /// A file that ended before the length it had when it was opened.
    pub const SHRANK: IoFailure = IoFailure {
        kind: io::ErrorKind::UnexpectedEof,
        os: None,
        what: Some(
            "the file shrank while it was sent: it ended before the length it had when opened",
        ),
    };
}

impl From<&io::Error> for IoFailure {
    fn from(e: &io::Error) -> IoFailure {
        IoFailure {
            kind: e.kind(),
            os: e.raw_os_error(),
            what: None,
        }
    }
}

impl From<io::ErrorKind> for IoFailure {
    fn from(kind: io::ErrorKind) -> IoFailure {
        IoFailure {
            kind,
            os: None,
            what: None,
        }
    }
}

impl std::fmt::Display for IoFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.what, self.os) {
            (Some(w), _) => f.write_str(w),
            (None, Some(code)) => io::Error::from_raw_os_error(code).fmt(f),
            (None, None) => io::Error::from(self.kind).fmt(f),
        }
    }
}

/// What travels from the reader thread to a [`Source::Pipe`].
#[derive(Debug)]
pub enum Fill {
    /// Data.
    Data(Chunk),
    /// End of input.
    Eof,
    /// Reading failed.
    Error(IoFailure),
}

/// What travels from a [`Sink::Pipe`] to the writer thread.
#[derive(Debug)]
pub enum Drain {
    /// Data.
    Data(Chunk),
    /// The stream ended: flush and stop.
    Eof,
}

/// Where a connection's bytes come from.
#[derive(Debug)]
pub enum Source {
    /// Nothing: the connection only receives.
    Empty,
    /// `len` bytes of the pattern stream `seed`.
    Pattern {
        /// Stream seed.
        seed: u64,
        /// Next offset.
        offset: u64,
        /// Total bytes.
        len: u64,
    },
    /// `len` zero bytes, at no cost once the send buffer's frames hold
    /// zeros: a frame is zeroed the first time, then only committed — the
    /// analogue of a kernel sender using `sendfile` (`iperf3 -Z`). For
    /// benchmarks.
    Zeros {
        /// Bytes produced so far.
        offset: u64,
        /// Total bytes.
        len: u64,
    },
    /// A regular file, read straight into the send buffer.
    File(FileSource),
    /// Chunks from a reader thread (standard input, pipes).
    Pipe(PipeSource),
}

/// Read ahead of the file position by this much (`posix_fadvise`).
const READ_AHEAD: u64 = 16 << 20;

/// A regular file read in place into send-buffer frames (see the module
/// doc): `xtcp send --file`, and iperf3's `-F` on each stream that sends
/// it (the file shared, each reading from its start).
#[derive(Debug)]
pub struct FileSource {
    file: std::sync::Arc<std::fs::File>,
    offset: u64,
    /// The offset it ends at ([`FileSource::up_to`]; else the file's end).
    end: u64,
    /// The file must hold at least this much (its length when opened, or
    /// `end` if less): an end of file before it fails the source.
    least: u64,
    /// The page cache was asked for everything below this offset.
    advised: u64,
    /// `RWF_NOWAIT` is not supported here: plain reads.
    blocking: bool,
}

impl FileSource {
    /// Reads `file` from its start to its end: what it holds now at least
    /// (a file that shrinks meanwhile fails it, [`IoFailure::SHRANK`]), and
    /// what is added to it before the end is reached.
    pub fn new(file: impl Into<std::sync::Arc<std::fs::File>>) -> FileSource {
        let file = file.into();
        let least = file
            .metadata()
            .ok()
            .filter(std::fs::Metadata::is_file)
            .map_or(0, |m| m.len());
        FileSource {
            file,
            offset: 0,
            end: u64::MAX,
            least,
            advised: 0,
            blocking: false,
        }
    }

    /// Ends after the first `len` bytes (fails if the file ends sooner).
    pub fn up_to(mut self, len: u64) -> FileSource {
        self.end = len;
        self.least = self.least.min(len);
        self
    }

    /// Bytes read so far.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    fn advise(&mut self) {
        if self.offset + READ_AHEAD / 2 >= self.advised {
            let from = self.advised.max(self.offset);
            // Advice only: an error changes nothing but speed.
            let _ = rustix::fs::fadvise(
                &self.file,
                from,
                std::num::NonZeroU64::new(READ_AHEAD),
                rustix::fs::Advice::WillNeed,
            );
            self.advised = from + READ_AHEAD;
        }
    }

    /// Reads into `bufs` (consecutive pieces of the stream) at the file
    /// position, without waiting for the disk: what is not in the page
    /// cache is read ahead and comes on a later call.
    pub fn produce_vectored(&mut self, bufs: &mut [&mut [u8]]) -> (usize, Produced) {
        let mut left = self.end.saturating_sub(self.offset);
        if left == 0 {
            return (0, Produced::Done);
        }
        self.advise();
        let mut iov: [io::IoSliceMut<'_>; crate::tcp::MAX_VECTORED] =
            std::array::from_fn(|_| io::IoSliceMut::new(&mut []));
        let n = bufs.len().min(iov.len());
        for (v, b) in iov.iter_mut().zip(bufs.iter_mut()) {
            let take = b.len().min(usize::try_from(left).unwrap_or(usize::MAX));
            left -= take as u64;
            *v = io::IoSliceMut::new(&mut b[..take]);
        }
        let flags = if self.blocking {
            rustix::io::ReadWriteFlags::empty()
        } else {
            rustix::io::ReadWriteFlags::NOWAIT
        };
        match rustix::io::preadv2(&self.file, &mut iov[..n], self.offset, flags) {
            Ok(0) if bufs.iter().any(|b| !b.is_empty()) => {
                if self.offset < self.least {
                    (0, Produced::Failed(IoFailure::SHRANK))
                } else {
                    (0, Produced::Done)
                }
            }
            Ok(k) => {
                self.offset += k as u64;
                (k, Produced::More)
            }
            Err(rustix::io::Errno::AGAIN) => (0, Produced::More),
            Err(rustix::io::Errno::OPNOTSUPP) if !self.blocking => {
                // A file system without RWF_NOWAIT: read as usual (the page
                // cache was asked to read ahead).
                self.blocking = true;
                self.produce_vectored(bufs)
            }
            Err(rustix::io::Errno::INTR) => (0, Produced::More),
            Err(e) => (0, Produced::Failed((&io::Error::from(e)).into())),
        }
    }
}

/// The worker end of a reader thread.
#[derive(Debug)]
pub struct PipeSource {
    full: Receiver<Fill>,
    free: Sender<Chunk>,
    cur: Option<(Chunk, usize)>,
    eof: bool,
    error: Option<IoFailure>,
}

/// What [`Source::produce`] says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Produced {
    /// More may come later.
    More,
    /// Everything was produced: close the connection.
    Done,
    /// Reading the input failed: abort the connection.
    Failed(IoFailure),
}

impl Source {
    /// Fills as much of `dst` (send-buffer space, in at most two pieces) as
    /// it can; returns the bytes written and whether the source is done.
    pub fn produce(&mut self, dst: (&mut [u8], &mut [u8])) -> (usize, Produced) {
        match self {
            Source::Empty => (0, Produced::Done),
            Source::Pattern { seed, offset, len } => {
                let mut n = 0;
                for piece in [dst.0, dst.1] {
                    let take = (piece.len() as u64).min(*len - *offset) as usize;
                    pattern_fill(*seed, *offset, &mut piece[..take]);
                    *offset += take as u64;
                    n += take;
                }
                let st = if *offset == *len {
                    Produced::Done
                } else {
                    Produced::More
                };
                (n, st)
            }
            Source::Zeros { offset, len } => {
                let room = (dst.0.len() + dst.1.len()) as u64;
                let n = room.min(*len - *offset);
                *offset += n;
                let st = if *offset == *len {
                    Produced::Done
                } else {
                    Produced::More
                };
                (n as usize, st)
            }
            Source::File(f) => {
                let (a, b) = dst;
                f.produce_vectored(&mut [a, b])
            }
            Source::Pipe(p) => p.produce(dst),
        }
    }
}

impl PipeSource {
    fn produce(&mut self, dst: (&mut [u8], &mut [u8])) -> (usize, Produced) {
        let mut n = 0;
        for piece in [dst.0, dst.1] {
            let mut at = 0;
            while at < piece.len() {
                if self.cur.is_none() {
                    if self.eof || self.error.is_some() {
                        break;
                    }
                    match self.full.try_recv() {
                        Ok(Fill::Data(c)) => self.cur = Some((c, 0)),
                        Ok(Fill::Eof) | Err(TryRecvError::Disconnected) => self.eof = true,
                        Ok(Fill::Error(e)) => self.error = Some(e),
                        Err(TryRecvError::Empty) => break,
                    }
                    continue;
                }
                let Some((c, pos)) = self.cur.as_mut() else {
                    break;
                };
                let k = (c.len - *pos).min(piece.len() - at);
                piece[at..at + k].copy_from_slice(&c.buf[*pos..*pos + k]);
                at += k;
                *pos += k;
                if *pos == c.len {
                    if let Some((c, _)) = self.cur.take() {
                        // The reader owns CHUNKS chunks; this cannot be full.
                        let _ = self.free.try_send(c);
                    }
                }
            }
            n += at;
            if at < piece.len() {
                break;
            }
        }
        let st = match (self.error, self.eof && self.cur.is_none()) {
            (Some(e), _) => Produced::Failed(e),
            (None, true) => Produced::Done,
            (None, false) => Produced::More,
        };
        (n, st)
    }
}

/// Where a connection's bytes go.
#[derive(Debug)]
pub enum Sink {
    /// Counted and dropped.
    Discard,
    /// Checked against the pattern stream `seed`.
    Verify {
        /// Stream seed.
        seed: u64,
        /// Next offset.
        offset: u64,
        /// First offset that differed.
        mismatch: Option<u64>,
    },
    /// Chunks to a writer thread.
    Pipe(PipeSink),
}

/// The worker end of a writer thread.
#[derive(Debug)]
pub struct PipeSink {
    full: Sender<Drain>,
    free: Receiver<Chunk>,
    cur: Option<Chunk>,
    /// The turn that first saw `cur` hold bytes (or last failed to hand it
    /// over part full): it goes at this plus [`FLUSH_AFTER`].
    held_since: Option<Instant>,
    closed: bool,
    /// The writer thread is gone (its output failed): nothing more can go.
    broken: bool,
}

impl Sink {
    /// Takes what it can of `src` (received bytes, in at most two pieces);
    /// returns the bytes taken (the caller consumes that many).
    pub fn consume(&mut self, src: (&[u8], &[u8])) -> usize {
        match self {
            Sink::Discard => src.0.len() + src.1.len(),
            Sink::Verify {
                seed,
                offset,
                mismatch,
            } => {
                for piece in [src.0, src.1] {
                    if mismatch.is_none() {
                        *mismatch = pattern_check(*seed, *offset, piece);
                    }
                    *offset += piece.len() as u64;
                }
                src.0.len() + src.1.len()
            }
            Sink::Pipe(p) => p.consume(src),
        }
    }

    /// The stream ended (the peer's FIN): flush what is buffered and tell
    /// the writer. Returns false if that must be retried (pipe full), or
    /// cannot be done ([`Sink::broken`]: the writer is gone).
    pub fn finish(&mut self) -> bool {
        match self {
            Sink::Discard | Sink::Verify { .. } => true,
            Sink::Pipe(p) => p.finish(),
        }
    }

    /// A connection's turn, after its sink took what it could: a writer's
    /// chunk that has held bytes for [`FLUSH_AFTER`] goes to the writer
    /// part full (if the pipe has room; else it is tried again
    /// [`FLUSH_AFTER`] later).
    pub fn flush_stale(&mut self, now: Instant) {
        if let Sink::Pipe(p) = self {
            p.flush_stale(now);
        }
    }

    /// When [`Sink::flush_stale`] has a chunk to hand over: the
    /// connection's next turn is due then at the latest.
    pub fn flush_at(&self) -> Option<Instant> {
        match self {
            Sink::Pipe(p) if !p.closed => p.held_since.map(|t| t + FLUSH_AFTER),
            _ => None,
        }
    }

    /// True once the sink can take nothing more: its writer thread ended
    /// (the output failed). The connection must then be aborted, or the
    /// sender would wait on a closed window for ever.
    pub fn broken(&self) -> bool {
        matches!(self, Sink::Pipe(p) if p.broken)
    }

    /// The connection ended (however it ended): takes all of `src` (the rest
    /// of the receive buffer), waiting for the writer where the pipe is
    /// full, and ends the stream. Not for the hot path: it blocks, once per
    /// connection, for as long as the writer needs to catch up. Returns the
    /// bytes taken: less than offered only if the writer thread is gone.
    pub fn close(&mut self, src: (&[u8], &[u8])) -> usize {
        match self {
            Sink::Discard | Sink::Verify { .. } => self.consume(src),
            Sink::Pipe(p) => p.close(src),
        }
    }
}

impl PipeSink {
    fn consume(&mut self, src: (&[u8], &[u8])) -> usize {
        let mut n = 0;
        for piece in [src.0, src.1] {
            let mut at = 0;
            while at < piece.len() {
                if self.cur.is_none() {
                    match self.free.try_recv() {
                        Ok(c) => self.cur = Some(c),
                        Err(e) => {
                            self.broken |= e == TryRecvError::Disconnected;
                            return n + at;
                        }
                    }
                }
                let Some(c) = self.cur.as_mut() else {
                    break;
                };
                let k = (c.buf.len() - c.len).min(piece.len() - at);
                c.buf[c.len..c.len + k].copy_from_slice(&piece[at..at + k]);
                c.len += k;
                at += k;
                if c.len == c.buf.len() && !self.push() {
                    return n + at;
                }
            }
            n += at;
        }
        n
    }

    fn flush_stale(&mut self, now: Instant) {
        if self.closed || self.cur.as_ref().is_none_or(|c| c.len == 0) {
            self.held_since = None;
            return;
        }
        match self.held_since {
            None => self.held_since = Some(now),
            Some(t) if now >= t + FLUSH_AFTER => {
                if !self.push() {
                    self.held_since = Some(now);
                }
            }
            Some(_) => {}
        }
    }

    /// Sends the current chunk to the writer; false if the pipe is full
    /// (the chunk stays current).
    fn push(&mut self) -> bool {
        let Some(c) = self.cur.take() else {
            return true;
        };
        match self.full.try_send(Drain::Data(c)) {
            Ok(()) => {
                self.held_since = None;
                true
            }
            Err(e) => {
                self.broken |= e.is_disconnected();
                if let Drain::Data(c) = e.into_inner() {
                    self.cur = Some(c);
                }
                false
            }
        }
    }

    fn close(&mut self, src: (&[u8], &[u8])) -> usize {
        let mut n = 0;
        for piece in [src.0, src.1] {
            let mut at = 0;
            while at < piece.len() && !self.broken {
                let mut c = match self.cur.take() {
                    Some(c) => c,
                    None => match self.free.recv() {
                        Ok(c) => c,
                        Err(_) => {
                            self.broken = true;
                            break;
                        }
                    },
                };
                let k = (c.buf.len() - c.len).min(piece.len() - at);
                c.buf[c.len..c.len + k].copy_from_slice(&piece[at..at + k]);
                c.len += k;
                at += k;
                if c.len < c.buf.len() {
                    self.cur = Some(c);
                } else if self.full.send(Drain::Data(c)).is_err() {
                    self.broken = true;
                }
            }
            n += at;
        }
        if !self.closed && !self.broken {
            let last = self.cur.take().filter(|c| c.len > 0).map(Drain::Data);
            for d in last.into_iter().chain([Drain::Eof]) {
                if self.full.send(d).is_err() {
                    self.broken = true;
                }
            }
            self.closed = true;
        }
        n
    }

    fn finish(&mut self) -> bool {
        if self.closed {
            return true;
        }
        if self.cur.as_ref().is_some_and(|c| c.len > 0) && !self.push() {
            return false;
        }
        match self.full.try_send(Drain::Eof) {
            Ok(()) => self.closed = true,
            // The writer is gone (its output failed after it had every
            // byte): no end can go either; the caller aborts. (Taken for a
            // full pipe, the connection waited for ever.)
            Err(e) => self.broken |= e.is_disconnected(),
        }
        self.closed
    }
}

fn chunks() -> (Sender<Chunk>, Receiver<Chunk>) {
    let (tx, rx) = bounded(CHUNKS);
    for _ in 0..CHUNKS {
        let _ = tx.try_send(Chunk {
            buf: vec![0u8; CHUNK_LEN].into_boxed_slice(),
            len: 0,
        });
    }
    (tx, rx)
}

/// Starts a thread that reads `input` to its end in chunks; returns the
/// worker's end of the pipe and the thread (it returns the bytes read).
/// What each read returns is handed over at once, so that a slow producer's
/// bytes (`tail -f log | xtcp send`) go out as they come, not once a chunk
/// is full; a fast one's reads fill whole chunks anyway.
pub fn spawn_reader(
    mut input: Box<dyn Read + Send>,
) -> io::Result<(Source, JoinHandle<io::Result<u64>>)> {
    let (free_tx, free_rx) = chunks();
    let (full_tx, full_rx) = bounded(CHUNKS + 1);
    let t = std::thread::Builder::new()
        .name("xtcp-reader".into())
        .spawn(move || -> io::Result<u64> {
            let mut total = 0u64;
            // Ends when the input ends or the worker drops its end.
            while let Ok(mut c) = free_rx.recv() {
                c.len = 0;
                let n = loop {
                    match input.read(&mut c.buf) {
                        Ok(n) => break n,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => {
                            let _ = full_tx.send(Fill::Error((&e).into()));
                            return Err(e);
                        }
                    }
                };
                if n == 0 {
                    let _ = full_tx.send(Fill::Eof);
                    return Ok(total);
                }
                c.len = n;
                total += n as u64;
                if full_tx.send(Fill::Data(c)).is_err() {
                    return Ok(total);
                }
            }
            Ok(total)
        })?;
    let src = Source::Pipe(PipeSource {
        full: full_rx,
        free: free_tx,
        cur: None,
        eof: false,
        error: None,
    });
    Ok((src, t))
}

/// How a writer thread gets its output: called when the first bytes (or
/// the end of the first stream) arrive, so that nothing is created or
/// truncated before a connection brought something.
pub type OpenOutput = Box<dyn FnOnce() -> io::Result<Box<dyn Write + Send>> + Send>;

/// The writer thread's error when its sink was dropped before any stream
/// reached it (no connection arrived): [`io::ErrorKind::NotConnected`].
pub const NO_STREAM: io::ErrorKind = io::ErrorKind::NotConnected;

/// What a writer thread wrote, and how it ended.
#[derive(Debug)]
pub struct Written {
    /// Bytes its output took, counted as `write` took them: where the
    /// output does not buffer (a `File`, not a `BufWriter`), what the file
    /// holds, also after a failed write.
    pub bytes: u64,
    /// Ok once the stream ended and the output was flushed; else the open
    /// or write error, an error of kind [`NO_STREAM`] if the sink went away
    /// before any stream reached it, or of kind
    /// [`io::ErrorKind::UnexpectedEof`] if the stream stopped short (its
    /// connection failed).
    pub result: io::Result<()>,
}

/// Writes all of `b` to `out`, adding to `total` what each `write` took.
fn write_counted(out: &mut dyn Write, mut b: &[u8], total: &mut u64) -> io::Result<()> {
    while !b.is_empty() {
        match out.write(b) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                *total += n as u64;
                b = &b[n..];
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Starts a thread that writes what the sink receives to the output `open`
/// gives; returns the worker's end and the thread, which returns what it
/// wrote and how it ended ([`Written`]).
pub fn spawn_writer(open: OpenOutput) -> io::Result<(Sink, JoinHandle<Written>)> {
    let (free_tx, free_rx) = chunks();
    let (full_tx, full_rx) = bounded::<Drain>(CHUNKS + 1);
    let t = std::thread::Builder::new()
        .name("xtcp-writer".into())
        .spawn(move || {
            let mut bytes = 0u64;
            let result = (|| {
                let mut open = Some(open);
                let mut output: Option<Box<dyn Write + Send>> = None;
                while let Ok(d) = full_rx.recv() {
                    let out = match &mut output {
                        Some(o) => o,
                        None => output.insert(open.take().map_or_else(
                            || Err(io::Error::other("the output was opened twice")),
                            |f| f(),
                        )?),
                    };
                    match d {
                        Drain::Data(mut c) => {
                            write_counted(out, &c.buf[..c.len], &mut bytes)?;
                            c.len = 0;
                            let _ = free_tx.try_send(c);
                        }
                        Drain::Eof => return out.flush(),
                    }
                }
                match output {
                    None => Err(io::Error::new(NO_STREAM, "no connection arrived")),
                    Some(mut o) => {
                        o.flush()?;
                        Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "the connection ended before its stream did",
                        ))
                    }
                }
            })();
            Written { bytes, result }
        })?;
    let sink = Sink::Pipe(PipeSink {
        full: full_tx,
        free: free_rx,
        cur: None,
        held_since: None,
        closed: false,
        broken: false,
    });
    Ok((sink, t))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_is_position_addressable() {
        let mut whole = vec![0u8; 1000];
        pattern_fill(7, 0, &mut whole);
        for (off, len) in [(0, 1), (3, 17), (8, 8), (13, 500), (999, 1)] {
            let mut part = vec![0u8; len];
            pattern_fill(7, off as u64, &mut part);
            assert_eq!(part, whole[off..off + len], "{off} {len}");
        }
        let mut other = vec![0u8; 1000];
        pattern_fill(8, 0, &mut other);
        assert_ne!(whole, other, "seeds give different streams");
        assert_eq!(pattern_check(7, 0, &whole), None);
        whole[777] ^= 1;
        assert_eq!(pattern_check(7, 0, &whole), Some(777));
        assert_eq!(pattern_check(7, 700, &whole[700..]), Some(777));
    }

    #[test]
    fn pattern_source_and_verify_sink_round_trip_in_odd_pieces() {
        let mut src = Source::Pattern {
            seed: 3,
            offset: 0,
            len: 10_000,
        };
        let mut sink = Sink::Verify {
            seed: 3,
            offset: 0,
            mismatch: None,
        };
        let (mut a, mut b) = ([0u8; 333], [0u8; 77]);
        let mut total = 0;
        loop {
            let (n, st) = src.produce((&mut a, &mut b));
            let (x, y) = (n.min(333), n.saturating_sub(333));
            assert_eq!(sink.consume((&a[..x], &b[..y])), n);
            total += n;
            if st == Produced::Done {
                break;
            }
        }
        assert_eq!(total, 10_000);
        assert!(matches!(
            sink,
            Sink::Verify {
                offset: 10_000,
                mismatch: None,
                ..
            }
        ));
    }

    #[test]
    fn pipes_carry_bytes_exactly_and_report_the_end() {
        let data: Vec<u8> = (0..3 * CHUNK_LEN + 123).map(|i| (i * 7) as u8).collect();
        let (mut src, reader) = spawn_reader(Box::new(io::Cursor::new(data.clone()))).unwrap();
        let (open, out, _) = recording();
        let (mut sink, writer) = spawn_writer(open).unwrap();
        let mut buf = vec![0u8; 70_000];
        let mut pending = 0;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let mut done = false;
        while std::time::Instant::now() < deadline {
            if !done && pending == 0 {
                let (a, b) = buf.split_at_mut(50_000);
                let (n, st) = src.produce((a, b));
                pending = n;
                done = st == Produced::Done;
            }
            if pending > 0 {
                let (a, b) = buf[..pending].split_at(pending.min(50_000));
                let took = sink.consume((a, b));
                buf.copy_within(took..pending, 0);
                pending -= took;
            }
            if done && pending == 0 && sink.finish() {
                break;
            }
            std::thread::yield_now();
        }
        assert_eq!(reader.join().unwrap().unwrap(), data.len() as u64);
        let w = writer.join().unwrap();
        assert_eq!((w.bytes, w.result.is_ok()), (data.len() as u64, true));
        assert!(*out.lock().unwrap() == data);
    }

    /// What a slow producer wrote reaches the worker before the producer
    /// writes more or ends (it used to wait for a whole chunk).
    #[test]
    fn a_slow_producers_bytes_are_handed_over_at_once() {
        /// "hello", then nothing until `go` says so, then the end.
        struct Slow {
            said: bool,
            go: crossbeam_channel::Receiver<()>,
        }
        impl Read for Slow {
            fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
                if !self.said {
                    self.said = true;
                    b[..5].copy_from_slice(b"hello");
                    return Ok(5);
                }
                let _ = self.go.recv();
                Ok(0)
            }
        }
        let (go_tx, go) = crossbeam_channel::bounded::<()>(1);
        let (mut src, reader) = spawn_reader(Box::new(Slow { said: false, go })).unwrap();
        let mut buf = [0u8; 64];
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let mut got = 0;
        while got == 0 {
            assert!(std::time::Instant::now() < deadline, "the bytes never came");
            let (a, b) = buf.split_at_mut(32);
            got = src.produce((a, b)).0;
            std::thread::yield_now();
        }
        assert_eq!(&buf[..got], b"hello");
        go_tx.send(()).unwrap();
        assert_eq!(reader.join().unwrap().unwrap(), 5);
    }

    /// An output that records what it got and whether it was ever opened.
    fn recording() -> (
        OpenOutput,
        std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
        std::sync::Arc<std::sync::atomic::AtomicBool>,
    ) {
        struct Rec(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
        impl Write for Rec {
            fn write(&mut self, b: &[u8]) -> io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let out = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let opened = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (o, f) = (out.clone(), opened.clone());
        let open: OpenOutput = Box::new(move || {
            f.store(true, std::sync::atomic::Ordering::SeqCst);
            Ok(Box::new(Rec(o)) as Box<dyn Write + Send>)
        });
        (open, out, opened)
    }

    #[test]
    fn close_delivers_a_partial_chunk_and_more_than_the_pipe_holds() {
        let (open, out, _) = recording();
        let (mut sink, writer) = spawn_writer(open).unwrap();
        // Less than a chunk through the hot path: it stays in the current
        // chunk (this is what an interrupted `recv` used to lose).
        let data: Vec<u8> = (0..(CHUNKS + 3) * CHUNK_LEN + 777)
            .map(|i| (i * 13 + 5) as u8)
            .collect();
        let first = 100_000;
        assert_eq!(sink.consume((&data[..first], &[])), first);
        // The rest at close: more than the pipe's chunks, so close waits
        // for the writer to recycle them.
        let (a, b) = data[first..].split_at(CHUNK_LEN + 1);
        assert_eq!(sink.close((a, b)), data.len() - first);
        assert!(!sink.broken());
        let w = writer.join().unwrap();
        assert_eq!((w.bytes, w.result.is_ok()), (data.len() as u64, true));
        assert!(*out.lock().unwrap() == data);
    }

    /// A part-full chunk goes to the writer once it has held bytes for
    /// [`FLUSH_AFTER`] (counted from the turn that first saw them), not
    /// before, and the next one's time starts with its own first bytes.
    #[test]
    fn a_part_full_chunk_goes_to_the_writer_after_flush_after() {
        let (open, out, _) = recording();
        let (mut sink, writer) = spawn_writer(open).unwrap();
        let t0 = Instant::now();
        assert_eq!(sink.flush_at(), None);
        assert_eq!(sink.consume((b"hello ", &[])), 6);
        sink.flush_stale(t0);
        assert_eq!(sink.flush_at(), Some(t0 + FLUSH_AFTER));
        sink.flush_stale(t0 + FLUSH_AFTER / 2);
        assert_eq!(sink.flush_at(), Some(t0 + FLUSH_AFTER));
        sink.flush_stale(t0 + FLUSH_AFTER);
        assert_eq!(sink.flush_at(), None, "handed over");
        let deadline = Instant::now() + Duration::from_secs(20);
        while out.lock().unwrap().len() < 6 {
            assert!(Instant::now() < deadline, "the writer never wrote it");
            std::thread::sleep(Duration::from_millis(1));
        }
        let t1 = t0 + 3 * FLUSH_AFTER;
        assert_eq!(sink.consume((b"world", &[])), 5);
        sink.flush_stale(t1);
        assert_eq!(sink.flush_at(), Some(t1 + FLUSH_AFTER));
        assert_eq!(sink.close((&[], &[])), 0);
        assert_eq!(sink.flush_at(), None, "closed");
        let w = writer.join().unwrap();
        assert_eq!((w.bytes, w.result.is_ok()), (11, true));
        assert_eq!(&*out.lock().unwrap(), b"hello world");
    }

    #[test]
    fn a_writer_that_got_no_stream_never_opens_its_output() {
        let (open, _, opened) = recording();
        let (sink, writer) = spawn_writer(open).unwrap();
        drop(sink);
        let w = writer.join().unwrap();
        assert_eq!(w.result.unwrap_err().kind(), NO_STREAM);
        assert_eq!(w.bytes, 0);
        assert!(!opened.load(std::sync::atomic::Ordering::SeqCst));
    }

    #[test]
    fn an_empty_stream_still_opens_the_output() {
        let (open, out, opened) = recording();
        let (mut sink, writer) = spawn_writer(open).unwrap();
        assert_eq!(sink.close((&[], &[])), 0);
        let w = writer.join().unwrap();
        assert_eq!((w.bytes, w.result.is_ok()), (0, true));
        assert!(opened.load(std::sync::atomic::Ordering::SeqCst));
        assert!(out.lock().unwrap().is_empty());
    }

    #[test]
    fn a_failed_output_breaks_the_sink() {
        let open: OpenOutput = Box::new(|| Err(io::Error::other("disk on fire")));
        let (mut sink, writer) = spawn_writer(open).unwrap();
        let data = vec![7u8; CHUNK_LEN * 2];
        let _ = sink.consume((&data, &[]));
        assert!(writer.join().unwrap().result.is_err());
        // The writer is gone: the next attempt notices.
        let _ = sink.consume((&data, &[]));
        let _ = sink.consume((&data, &[]));
        assert!(sink.broken());
        assert!(sink.close((&data, &[])) < data.len());
    }

    /// The writer fails after the sink handed it every byte, before the
    /// stream's end: the end cannot go, and the sink says it is broken
    /// (it said "pipe full", and the connection waited for ever).
    #[test]
    fn an_output_that_fails_after_the_last_byte_breaks_the_end() {
        struct Fails;
        impl Write for Fails {
            fn write(&mut self, _: &[u8]) -> io::Result<usize> {
                Err(io::Error::new(io::ErrorKind::StorageFull, "full"))
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let open: OpenOutput = Box::new(|| Ok(Box::new(Fails) as Box<dyn Write + Send>));
        let (mut sink, writer) = spawn_writer(open).unwrap();
        let data = vec![7u8; CHUNK_LEN];
        // One whole chunk goes to the writer, which fails on it and ends.
        assert_eq!(sink.consume((&data, &[])), data.len());
        assert!(writer.join().unwrap().result.is_err());
        assert!(!sink.broken(), "nothing has tried the pipe since");
        assert!(!sink.finish());
        assert!(sink.broken());
    }

    /// An output that fills up part-way through a write (a full disk):
    /// the writer says so, and counts exactly what it took, the part of the
    /// last chunk included.
    #[test]
    fn a_full_output_counts_what_it_took() {
        struct Full(Vec<u8>, usize);
        impl Write for Full {
            fn write(&mut self, b: &[u8]) -> io::Result<usize> {
                let room = self.1 - self.0.len();
                if room == 0 {
                    return Err(io::Error::from_raw_os_error(libc::ENOSPC));
                }
                // Short writes, as a file system near full gives them.
                let n = b.len().min(room).min(10_000);
                self.0.extend_from_slice(&b[..n]);
                Ok(n)
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let room = CHUNK_LEN + 54_321;
        let open: OpenOutput = Box::new(move || Ok(Box::new(Full(Vec::new(), room)) as _));
        let (mut sink, writer) = spawn_writer(open).unwrap();
        let data = vec![9u8; 4 * CHUNK_LEN];
        let _ = sink.close((&data, &[]));
        let w = writer.join().unwrap();
        assert_eq!(w.bytes, room as u64);
        let e = w.result.unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
    }

    /// A file read in place, vectored, in odd pieces: every byte, in order,
    /// also when the page cache has been told to drop it first (then reads
    /// that would wait return nothing and the read-ahead brings it).
    #[test]
    fn a_file_source_reads_every_byte_in_place() {
        let dir = std::env::temp_dir().join(format!("xtcp-file-source-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("data");
        let data: Vec<u8> = (0..5_000_000u32).map(|i| (i * 13 + i / 7) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        for evict in [false, true] {
            let f = std::fs::File::open(&path).unwrap();
            if evict {
                f.sync_all().unwrap();
                let _ = rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::DontNeed);
            }
            let mut src = FileSource::new(f);
            let mut got = Vec::with_capacity(data.len());
            let mut bufs = vec![vec![0u8; 4096]; 5];
            bufs[0].truncate(1000);
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
            loop {
                assert!(
                    std::time::Instant::now() < deadline,
                    "stuck at {}",
                    got.len()
                );
                let mut views: Vec<&mut [u8]> = bufs.iter_mut().map(|b| &mut b[..]).collect();
                let (n, st) = src.produce_vectored(&mut views);
                let mut left = n;
                for b in &bufs {
                    let t = left.min(b.len());
                    got.extend_from_slice(&b[..t]);
                    left -= t;
                }
                match st {
                    Produced::Done => break,
                    Produced::More if n == 0 => std::thread::yield_now(),
                    Produced::More => {}
                    Produced::Failed(e) => panic!("{e:?}"),
                }
            }
            assert_eq!(got.len(), data.len(), "evict {evict}");
            assert!(got == data, "evict {evict}: bytes differ");
            assert_eq!(src.offset(), data.len() as u64);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A file that shrinks while it is read fails the source where it now
    /// ends (the receiver is then reset: its stream is short of what was
    /// meant), also within `up_to`; one that grows is read to its new end.
    #[test]
    fn a_file_that_shrinks_fails_one_that_grows_is_read_on() {
        let dir = std::env::temp_dir().join(format!("xtcp-shrink-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("data");
        // Reads until the source says it is done or failed: the bytes, the
        // outcome.
        let drain = |src: &mut FileSource| {
            let mut buf = vec![0u8; 4096];
            let mut got = 0u64;
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
            loop {
                assert!(std::time::Instant::now() < deadline, "stuck at {got}");
                let (n, st) = src.produce_vectored(&mut [&mut buf[..]]);
                got += n as u64;
                match st {
                    Produced::More => std::thread::yield_now(),
                    st => return (got, st),
                }
            }
        };
        for up_to in [None, Some(50_000)] {
            std::fs::write(&path, vec![1u8; 100_000]).unwrap();
            let mut src = FileSource::new(std::fs::File::open(&path).unwrap());
            if let Some(n) = up_to {
                src = src.up_to(n);
            }
            let mut buf = vec![0u8; 10_000];
            let (n, _) = src.produce_vectored(&mut [&mut buf[..]]);
            std::fs::File::options()
                .write(true)
                .open(&path)
                .unwrap()
                .set_len(20_000)
                .unwrap();
            let (rest, st) = drain(&mut src);
            assert_eq!(
                (n as u64 + rest, st),
                (20_000, Produced::Failed(IoFailure::SHRANK)),
                "{up_to:?}"
            );
        }
        assert!(IoFailure::SHRANK.to_string().contains("shrank"));
        std::fs::write(&path, vec![1u8; 10_000]).unwrap();
        let mut src = FileSource::new(std::fs::File::open(&path).unwrap());
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(&[2u8; 5_000])
            .unwrap();
        assert_eq!(drain(&mut src), (15_000, Produced::Done));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_read_error_reaches_the_source() {
        struct Bad;
        impl Read for Bad {
            fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
                Err(io::Error::new(io::ErrorKind::PermissionDenied, "no"))
            }
        }
        let (mut src, t) = spawn_reader(Box::new(Bad)).unwrap();
        // The reader ends at the error, having passed it on.
        assert!(t.join().unwrap().is_err());
        let mut a = [0u8; 10];
        let st = src.produce((&mut a, &mut [])).1;
        assert_eq!(st, Produced::Failed(io::ErrorKind::PermissionDenied.into()));
    }
}
