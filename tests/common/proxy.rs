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
//! [`command`]: redquorum::local_servers::command

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
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
    /// Set by [`Proxy::close_on_next_reply`].
    close_on_reply: AtomicBool,
    /// The switches of the connections that may still be open (pruned of
    /// ended ones as new ones come), and whether the proxy is cut: under
    /// the one lock, so that a connection is either accepted before a cut
    /// or a heal (and switched by it) or after (and starts in its state).
    open: Mutex<Switches>,
}

/// What the proxy does with a connection's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flow {
    /// Forwarded both ways.
    Open,
    /// Held both ways, in order, to be delivered when the cut heals (what
    /// TCP's retransmissions do after a partition).
    Held,
    /// Swallowed both ways; the sockets stay open (no FIN, no RST).
    Silent,
    /// Closed: both sockets of a silenced connection are dropped.
    Closed,
}

#[derive(Default)]
struct Switches {
    /// How connections accepted now start: `Open`, or as the cut has it.
    new: Option<Flow>,
    connections: Vec<watch::Sender<Flow>>,
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
            close_on_reply: AtomicBool::new(false),
            open: Mutex::default(),
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
        self.shared
            .switch(|flow| (flow == Flow::Open).then_some(Flow::Silent));
    }

    /// A partition without RST, as a dead NAT entry or a failed-over
    /// virtual IP makes it: every connection open now, and every one
    /// accepted until [`heal`](Proxy::heal), is held open and silent (bytes
    /// swallowed both ways); the heal closes them.
    pub fn cut(&self) {
        self.shared.switches().new = Some(Flow::Silent);
        self.blackhole_existing();
    }

    /// A partition without RST, as a pulled cable makes it: every
    /// connection open now, and every one accepted until
    /// [`heal`](Proxy::heal), holds what it is sent, in order; the heal
    /// delivers it all (as TCP's retransmissions would) and forwarding goes
    /// on.
    pub fn hold(&self) {
        self.shared.switches().new = Some(Flow::Held);
        self.shared
            .switch(|flow| (flow == Flow::Open).then_some(Flow::Held));
    }

    /// Ends a partition: silenced connections are closed (their sockets
    /// dropped), held ones deliver what they hold, and connections accepted
    /// from now on pass.
    pub fn heal(&self) {
        self.shared.switches().new = None;
        self.shared.switch(|flow| match flow {
            Flow::Silent => Some(Flow::Closed),
            Flow::Held => Some(Flow::Open),
            Flow::Open | Flow::Closed => None,
        });
    }

    /// The next reply the node sends (the next chunk towards a client, on
    /// any connection) is swallowed, and every connection open then is
    /// closed: the node ran the command, and the client sees its connection
    /// break before the answer.
    pub fn close_on_next_reply(&self) {
        self.shared.close_on_reply.store(true, Ordering::SeqCst);
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
    fn switches(&self) -> std::sync::MutexGuard<'_, Switches> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Moves every open connection to the flow `to` gives it, if any.
    fn switch(&self, to: impl Fn(Flow) -> Option<Flow>) {
        for switch in &self.switches().connections {
            switch.send_if_modified(|flow| match to(*flow) {
                Some(next) => {
                    *flow = next;
                    true
                }
                None => false,
            });
        }
    }

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
        let flow = {
            // Registered before it forwards a byte, under the lock that
            // `blackhole_existing`, `cut` and `heal` take: a connection is
            // either open when they are called (and switched) or accepted
            // after them (and starts as they left the proxy).
            let mut open = shared.switches();
            let (switch, flow) = watch::channel(open.new.unwrap_or(Flow::Open));
            open.connections.retain(|s| !s.is_closed());
            open.connections.push(switch);
            flow
        };
        shared.accepted.fetch_add(1, Ordering::SeqCst);
        tokio::spawn(serve(client, shared.clone(), flow));
    }
}

/// Forwards one connection until both directions end (holding what it
/// gets while held); once it is silenced, holds it open and silent until
/// it is closed.
async fn serve(client: TcpStream, shared: Arc<Shared>, mut flow: watch::Receiver<Flow>) {
    let closed = |mut flow: watch::Receiver<Flow>| async move {
        let _ = flow.wait_for(|&f| f == Flow::Closed).await;
    };
    let silenced = |f: &Flow| matches!(f, Flow::Silent | Flow::Closed);
    if silenced(&flow.borrow()) {
        // Accepted during a cut: never forwarded, closed by the heal (or
        // when the proxy stops).
        closed(flow).await;
        return;
    }
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
    let (up, down) = (flow.clone(), flow.clone());
    let forward = async {
        tokio::join!(
            pipe(&mut client_read, &mut upstream_write, &shared, up, false),
            pipe(&mut upstream_read, &mut client_write, &shared, down, true),
        )
    };
    tokio::select! {
        _ = forward => {}
        () = async {
            // (The guard it returns must not live across the wait below.)
            let _ = flow.wait_for(silenced).await;
        } => {
            // Nothing more is read or written; the sockets stay open until
            // the connection is closed or the proxy stops.
            closed(flow).await;
        }
    }
}

/// One direction: reads chunks as they come and delivers each at its
/// receipt plus the delay, in order, and not while the connection is held;
/// passes the end of the stream on as a half-close.
async fn pipe(
    from: &mut OwnedReadHalf,
    to: &mut OwnedWriteHalf,
    shared: &Shared,
    mut flow: watch::Receiver<Flow>,
    towards_client: bool,
) {
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
            if flow.wait_for(|&f| f != Flow::Held).await.is_err() {
                return;
            }
            if towards_client && shared.close_on_reply.swap(false, Ordering::SeqCst) {
                shared.switch(|_| Some(Flow::Closed));
                return;
            }
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

/// One proxy in front of each node of `servers`.
pub fn in_front_of(servers: &redquorum::local_servers::LocalServers) -> Vec<Proxy> {
    (0..servers.len())
        .map(|i| Proxy::start(servers.port(i)))
        .collect()
}

/// A client's builder that reaches exactly the nodes `majority` through
/// `proxies` (one per node): the proxies to the others are cut (silent), so
/// its requests there never arrive. Node timeout 300 ms.
pub fn steered(proxies: &[Proxy], majority: &[usize]) -> redquorum::Builder {
    for (i, proxy) in proxies.iter().enumerate() {
        if !majority.contains(&i) {
            proxy.cut();
        }
    }
    redquorum::Redlock::builder()
        .nodes(proxies.iter().map(Proxy::url))
        .node_timeout(Duration::from_millis(300))
}
