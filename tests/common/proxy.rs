//! A TCP proxy on a free loopback port in front of one node, for tests that
//! need a distant node (an added delay) or a node whose connections die
//! silently (a dead NAT entry, a failover behind a virtual IP).
//!
//! It runs on a thread of its own with a runtime of its own, so that a test
//! that blocks its runtime (the blocking [`command`] helper, say) does not
//! stall the traffic, and so that it works under any test runtime. Dropping
//! the [`Proxy`] stops it: the accept loop and every connection end, and
//! their sockets close.
//!
//! Each accepted connection gets a connection to the upstream port and two
//! forwarding directions. A direction reads chunks as they come, stamps each
//! with `received_at + delay` and queues it; a writer delivers the queue in
//! order, each chunk not before its stamp. Chunks are delayed, not
//! serialized: a burst costs one delay, not one per chunk.
//!
//! [`command`]: redquorum::local_cluster::command

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

/// A TCP proxy in front of `127.0.0.1:upstream`; stopped on drop.
pub struct Proxy {
    port: u16,
    shared: Arc<Shared>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

/// What the test's handle and the proxy's thread share.
struct Shared {
    upstream: SocketAddr,
    /// The added one-way delay, in nanoseconds.
    delay: AtomicU64,
    /// How many connections have been accepted.
    accepted: AtomicUsize,
    /// The blackhole switches of the connections that may still be open
    /// (pruned of ended ones as new ones come).
    open: Mutex<Vec<watch::Sender<bool>>>,
}

impl Proxy {
    /// A proxy on a free loopback port in front of `127.0.0.1:upstream_port`,
    /// accepting connections by the time this returns. Needs no runtime.
    pub fn start(upstream_port: u16) -> Proxy {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let port = listener.local_addr().expect("the proxy's address").port();
        listener
            .set_nonblocking(true)
            .expect("a non-blocking listener");
        let shared = Arc::new(Shared {
            upstream: SocketAddr::from(([127, 0, 0, 1], upstream_port)),
            delay: AtomicU64::new(0),
            accepted: AtomicUsize::new(0),
            open: Mutex::new(Vec::new()),
        });
        let (stop, stopped) = oneshot::channel();
        let thread = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name(format!("proxy-{port}-{upstream_port}"))
                .spawn(move || {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .expect("the proxy's runtime");
                    runtime.block_on(async move {
                        let listener = TcpListener::from_std(listener).expect("a tokio listener");
                        tokio::select! {
                            _ = stopped => {}
                            () = accept_loop(listener, shared) => {}
                        }
                    });
                    // Dropping the runtime drops every connection's task,
                    // which closes its sockets.
                    drop(runtime);
                })
                .expect("the proxy's thread")
        };
        Proxy {
            port,
            shared,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// The proxy's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT`, the proxy's URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Delays every chunk, in both directions and on every connection, by
    /// `delay` from when the proxy received it: a round trip costs twice
    /// `delay` more. Applies to chunks received from now on.
    pub fn set_delay(&self, delay: Duration) {
        let nanos = u64::try_from(delay.as_nanos()).expect("a delay that fits u64 nanoseconds");
        self.shared.delay.store(nanos, Ordering::Relaxed);
    }

    /// Every connection open now stops forwarding in both directions for
    /// good: what it holds or receives later is never delivered, and both
    /// of its sockets stay open (no FIN, no RST) until the proxy is dropped.
    /// Connections accepted later work normally.
    pub fn blackhole_existing(&self) {
        let open = self.shared.open.lock().unwrap_or_else(|p| p.into_inner());
        for switch in open.iter() {
            switch.send_replace(true);
        }
    }

    /// How many connections the proxy has accepted so far.
    pub fn connections(&self) -> usize {
        self.shared.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("port", &self.port)
            .field("upstream", &self.shared.upstream)
            .field("connections", &self.connections())
            .finish()
    }
}

impl Shared {
    fn delay(&self) -> Duration {
        Duration::from_nanos(self.delay.load(Ordering::Relaxed))
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let client = match listener.accept().await {
            Ok((client, _)) => client,
            // Out of file descriptors, say: try again shortly, no busy loop.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let (switch, blackholed) = watch::channel(false);
        {
            // Registered before it forwards a byte, under the lock that
            // `blackhole_existing` takes: a connection is either open when
            // that is called (and blackholed) or accepted after it.
            let mut open = shared.open.lock().unwrap_or_else(|p| p.into_inner());
            open.retain(|s| !s.is_closed());
            open.push(switch);
        }
        shared.accepted.fetch_add(1, Ordering::SeqCst);
        tokio::spawn(serve(client, shared.clone(), blackholed));
    }
}

/// Forwards one connection until both directions end, or holds it open and
/// silent forever once it is blackholed.
async fn serve(client: TcpStream, shared: Arc<Shared>, mut blackholed: watch::Receiver<bool>) {
    // A node that is down: the client sees its connection closed.
    let Ok(upstream) = TcpStream::connect(shared.upstream).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    // Owned here, so that they outlive the forwarding when it is abandoned
    // (dropping a write half would send a FIN).
    let (mut client_read, mut client_write) = client.into_split();
    let (mut upstream_read, mut upstream_write) = upstream.into_split();
    let forward = async {
        tokio::join!(
            pipe(&mut client_read, &mut upstream_write, &shared),
            pipe(&mut upstream_read, &mut client_write, &shared),
        )
    };
    tokio::select! {
        _ = forward => {}
        () = async {
            // (The guard it returns must not live across the pending below.)
            let _ = blackholed.wait_for(|&on| on).await;
        } => {
            // Nothing more is read or written; the sockets stay open until
            // the proxy stops.
            std::future::pending::<()>().await;
        }
    }
}

/// One direction: reads chunks as they come and delivers each at its
/// receipt plus the delay, in order; passes the end of the stream on as a
/// half-close.
async fn pipe(from: &mut OwnedReadHalf, to: &mut OwnedWriteHalf, shared: &Shared) {
    // `None`: the end of the stream.
    let (queue, mut queued) = mpsc::unbounded_channel::<(Instant, Option<Vec<u8>>)>();
    let read = async move {
        let mut buf = vec![0; 64 * 1024];
        loop {
            let n = from.read(&mut buf).await.unwrap_or(0);
            let due = Instant::now() + shared.delay();
            let chunk = (n > 0).then(|| buf[..n].to_vec());
            // The writer stopped (its side is gone): nothing to read for.
            if queue.send((due, chunk)).is_err() || n == 0 {
                return;
            }
        }
    };
    let write = async move {
        while let Some((due, chunk)) = queued.recv().await {
            tokio::time::sleep_until(due).await;
            match chunk {
                Some(bytes) => {
                    if to.write_all(&bytes).await.is_err() {
                        return;
                    }
                }
                None => {
                    let _ = to.shutdown().await;
                    return;
                }
            }
        }
    };
    tokio::join!(read, write);
}
