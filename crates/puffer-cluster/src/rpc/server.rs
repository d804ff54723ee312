//! The replica service of one node: serves calls for the shards of its database.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use puffer_node::database::Database;
use puffer_node::message::{
    ReadRequest, ReplicaRequest, ReplicaResponse, Reply, ShardReplicas, Wait,
};
use puffer_node::remote::LeaderRequest;
use puffer_node::serving::ShardGroup;
use puffer_query::QueryError;
use puffer_store::Shard;
use puffer_store::StoreError;
use tokio::sync::{oneshot, Semaphore};
use tonic::{Request, Response, Status};

use super::proto::replica_server::{Replica, ReplicaServer};
use super::proto::{
    AccessCountsAnswer, AccessCountsRequest, LeadAnswer, LeadCall, PublishedAnswer,
    PublishedRequest, ReplicaAnswer, ReplicaCall, ReplicaChunk, TakeOnAnswer, TakeOnCall,
};
use super::{
    status_of, CHUNK_BYTES, MAX_CALLS_IN_FLIGHT, MAX_MESSAGE_BYTES, MAX_STREAMED_ANSWER_BYTES,
};
use crate::error::{ClusterError, Result};
use crate::runtime::Bridge;

/// Most bytes of a call decoded on the event loop thread (a get's is far smaller; a
/// larger call is decoded on a blocking thread, off the loop).
const SMALL_CALL_BYTES: usize = 4096;
/// Longest a call may run on the server, whatever deadline its caller set.
pub const MAX_CALL_TIME: Duration = Duration::from_secs(60);
/// Longest a `Published` call waits for a snapshot it was asked to hold.
pub const MAX_PUBLISHED_WAIT: Duration = Duration::from_secs(10);

/// Takes shard `shard` of table `table` (uid `uid`) on here, now (see
/// [`crate::holding::take_on`]); `Ok` once it is held.
pub type ShardTaker = Arc<dyn Fn(&str, u64, u32) -> puffer_query::Result<()> + Send + Sync>;

struct Service {
    database: Arc<Database>,
    in_flight: Arc<Semaphore>,
    /// Set on a node that holds only the shards placed on it.
    taker: Option<ShardTaker>,
}

impl Service {
    /// The call's request and the shard it is for.
    fn open(
        database: &Database,
        call: &ReplicaCall,
    ) -> puffer_query::Result<(ReplicaRequest, Arc<ShardGroup<Shard>>)> {
        let request: ReplicaRequest = super::decode(&call.request).map_err(|e| {
            QueryError::Invalid(format!("a replica request that does not decode: {e}"))
        })?;
        let table = database.table(&call.table)?;
        if table.uid() != call.table_uid {
            return Err(QueryError::UnknownTable(format!(
                "{} with uid {} (this node has uid {})",
                call.table,
                call.table_uid,
                table.uid()
            )));
        }
        let shards = table.layout().shards;
        if call.shard >= shards {
            return Err(QueryError::Invalid(format!(
                "table {} has {shards} shards; there is no shard {}",
                call.table, call.shard
            )));
        }
        let group = table.shard_group(call.shard).ok_or_else(|| {
            QueryError::from(puffer_node::shards::not_held(&call.table, call.shard))
        })?;
        Ok((request, group))
    }

    /// The call's answer, the call decoded once. A small call is opened on the event
    /// loop thread, and a get among them answered there when a replica is free now
    /// (as the HTTP server does: a get is short, and a hand-off to a blocking thread
    /// costs more than it); everything else runs on a blocking thread.
    async fn answered(&self, call: ReplicaCall) -> std::result::Result<Answer, Status> {
        let status = |error: QueryError| status_of(&error);
        if call.replica.is_none() && call.request.len() <= SMALL_CALL_BYTES {
            let (request, group) = Service::open(&self.database, &call).map_err(status)?;
            let request = match request {
                ReplicaRequest::Read(ReadRequest::Get { .. } | ReadRequest::GetRaw { .. }) => {
                    match group
                        .read(request, Wait::Never)
                        .map_err(|e| status(e.into()))?
                    {
                        Reply::Answered(response) => {
                            return encoded(&response, &group).map_err(status)
                        }
                        Reply::WouldWait(request) => request,
                    }
                }
                other => other,
            };
            return self
                .blocking(move |_| Service::answer(request, &group, None))
                .await;
        }
        self.blocking(move |database| {
            let (request, group) = Service::open(database, &call)?;
            Service::answer(request, &group, call.replica)
        })
        .await
    }

    fn answer(
        request: ReplicaRequest,
        group: &ShardGroup<Shard>,
        replica: Option<u32>,
    ) -> puffer_query::Result<Answer> {
        let response = match replica {
            Some(replica) => group.send_to(replica, request)?,
            None => match group.read(request, Wait::Allowed)? {
                Reply::Answered(response) => response,
                Reply::WouldWait(_) => {
                    return Err(StoreError::Unavailable(
                        "a waiting read came back unanswered".into(),
                    )
                    .into())
                }
            },
        };
        encoded(&response, group)
    }

    fn lead(database: &Database, call: LeadCall) -> puffer_query::Result<Vec<u8>> {
        let request: LeaderRequest = super::decode(&call.request).map_err(|e| {
            QueryError::Invalid(format!("a leader request that does not decode: {e}"))
        })?;
        let response = database.lead(request)?;
        super::encode(&response)
            .map_err(|e| QueryError::Invalid(format!("cannot encode the answer: {e}")))
    }

    /// Runs `work` on a blocking thread within the in-flight bound and the longest
    /// call time.
    async fn blocking(
        &self,
        work: impl FnOnce(&Database) -> puffer_query::Result<Answer> + Send + 'static,
    ) -> std::result::Result<Answer, Status> {
        let Ok(permit) = Arc::clone(&self.in_flight).try_acquire_owned() else {
            return Err(status_of(
                &StoreError::Overloaded(format!(
                    "this node runs {MAX_CALLS_IN_FLIGHT} replica calls already"
                ))
                .into(),
            ));
        };
        let database = Arc::clone(&self.database);
        // Shards answer on blocking threads (their queues and workers may wait).
        let answered = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            work(&database)
        });
        match tokio::time::timeout(MAX_CALL_TIME, answered).await {
            Ok(Ok(Ok(bytes))) => Ok(bytes),
            Ok(Ok(Err(error))) => Err(status_of(&error)),
            Ok(Err(join)) => Err(Status::internal(format!("the call failed: {join}"))),
            Err(_) => Err(Status::deadline_exceeded(format!(
                "no answer within {} s",
                MAX_CALL_TIME.as_secs()
            ))),
        }
    }
}

#[tonic::async_trait]
impl Replica for Service {
    async fn published(
        &self,
        request: Request<PublishedRequest>,
    ) -> std::result::Result<Response<PublishedAnswer>, Status> {
        let PublishedRequest { at_least, wait_ms } = request.into_inner();
        let wait = Duration::from_millis(wait_ms.into());
        if wait > MAX_PUBLISHED_WAIT {
            return Err(Status::invalid_argument(format!(
                "a wait of {wait_ms} ms for snapshot {at_least} was asked; at most {} ms",
                MAX_PUBLISHED_WAIT.as_millis()
            )));
        }
        let published = self.database.published();
        if published >= at_least || wait.is_zero() {
            return Ok(Response::new(PublishedAnswer {
                published,
                waited: false,
            }));
        }
        // A waiting call counts among the calls in flight until its wait ends (even
        // once its caller gave up: the permit goes with the blocked thread), so waits
        // are bounded too.
        let permit = Arc::clone(&self.in_flight)
            .try_acquire_owned()
            .map_err(|_| {
                status_of(
                    &StoreError::Overloaded(format!(
                        "this node runs {MAX_CALLS_IN_FLIGHT} replica calls already"
                    ))
                    .into(),
                )
            })?;
        // Blocked on a thread of the blocking pool, woken by the publication itself
        // (which also wakes the follower: it looks at the log now, not at the end of
        // its interval). A poll every millisecond added about one to every read of a
        // front's own write.
        let database = Arc::clone(&self.database);
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            database.wait_published(at_least, wait);
            PublishedAnswer {
                published: database.published(),
                waited: true,
            }
        })
        .await
        .map(Response::new)
        .map_err(|e| Status::internal(format!("the wait for snapshot {at_least} failed: {e}")))
    }

    async fn call(
        &self,
        request: Request<ReplicaCall>,
    ) -> std::result::Result<Response<ReplicaAnswer>, Status> {
        let (response, queue_length) = self.answered(request.into_inner()).await?;
        Ok(Response::new(ReplicaAnswer {
            response,
            queue_length: queue_length as u64,
        }))
    }

    type CallStreamStream = std::pin::Pin<
        Box<dyn futures_util::Stream<Item = std::result::Result<ReplicaChunk, Status>> + Send>,
    >;

    // The stream's items are tonic's `Result<_, Status>`, whatever their size.
    #[allow(clippy::result_large_err)]
    async fn call_stream(
        &self,
        request: Request<ReplicaCall>,
    ) -> std::result::Result<Response<Self::CallStreamStream>, Status> {
        let (response, queue_length) = self.answered(request.into_inner()).await?;
        if response.len() > MAX_STREAMED_ANSWER_BYTES {
            return Err(status_of(&QueryError::Limit(format!(
                "an answer of {} bytes; at most {MAX_STREAMED_ANSWER_BYTES} cross between \
                 nodes (ask for fewer rows)",
                response.len()
            ))));
        }
        let queue_length = queue_length as u64;
        // Chunks are cut from the encoded answer as the stream is read.
        let chunks = (0..response.len().div_ceil(CHUNK_BYTES).max(1)).map(move |i| {
            let end = ((i + 1) * CHUNK_BYTES).min(response.len());
            Ok(ReplicaChunk {
                part: response[i * CHUNK_BYTES..end].to_vec(),
                queue_length,
            })
        });
        Ok(Response::new(Box::pin(futures_util::stream::iter(chunks))))
    }

    async fn lead(
        &self,
        request: Request<LeadCall>,
    ) -> std::result::Result<Response<LeadAnswer>, Status> {
        let call = request.into_inner();
        let (response, _) = self
            .blocking(move |database| Service::lead(database, call).map(|bytes| (bytes, 0)))
            .await?;
        Ok(Response::new(LeadAnswer { response }))
    }

    async fn access_counts(
        &self,
        _request: Request<AccessCountsRequest>,
    ) -> std::result::Result<Response<AccessCountsAnswer>, Status> {
        let counts = super::encode(&self.database.shard_reads())
            .map_err(|e| Status::internal(format!("cannot encode the access counts: {e}")))?;
        Ok(Response::new(AccessCountsAnswer {
            counts,
            memory_budget_bytes: self.database.node().memory_budget_bytes(),
        }))
    }

    async fn take_on(
        &self,
        request: Request<TakeOnCall>,
    ) -> std::result::Result<Response<TakeOnAnswer>, Status> {
        let call = request.into_inner();
        let Some(taker) = self.taker.clone() else {
            return Err(status_of(&QueryError::Invalid(
                "this node holds every shard; it takes none on".into(),
            )));
        };
        self.blocking(move |_| {
            taker(&call.table, call.table_uid, call.shard).map(|()| (Vec::new(), 0))
        })
        .await?;
        Ok(Response::new(TakeOnAnswer {}))
    }
}

/// An encoded response and the queue length of the shard that gave it.
type Answer = (Vec<u8>, usize);

fn encoded(response: &ReplicaResponse, group: &ShardGroup<Shard>) -> puffer_query::Result<Answer> {
    let bytes = super::encode(response)
        .map_err(|e| QueryError::Invalid(format!("cannot encode the answer: {e}")))?;
    Ok((bytes, group.queue_length()))
}

/// A running replica service; stops when dropped.
pub struct RpcServer {
    address: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    bridge: Bridge,
}

impl std::fmt::Debug for RpcServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RpcServer")
            .field("address", &self.address)
            .finish()
    }
}

impl RpcServer {
    /// Serves `database`'s shards on `address` (port 0: any free port).
    pub fn start(database: Arc<Database>, address: SocketAddr) -> Result<RpcServer> {
        RpcServer::start_with(database, address, None)
    }

    /// [`RpcServer::start`] on a node that takes shards on when asked (`taker`).
    pub fn start_with(
        database: Arc<Database>,
        address: SocketAddr,
        taker: Option<ShardTaker>,
    ) -> Result<RpcServer> {
        let bridge = Bridge::start("puffer-rpc")?;
        let listener = std::net::TcpListener::bind(address)
            .and_then(|l| l.set_nonblocking(true).map(|()| l))
            .map_err(|e| ClusterError::Unavailable(format!("cannot listen on {address}: {e}")))?;
        let address = listener
            .local_addr()
            .map_err(|e| ClusterError::Unavailable(format!("no local address: {e}")))?;
        let (stop, stopped) = oneshot::channel::<()>();
        let service = ReplicaServer::new(Service {
            database,
            in_flight: Arc::new(Semaphore::new(MAX_CALLS_IN_FLIGHT)),
            taker,
        })
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
        let ready = bridge.call(Duration::from_secs(5), async move {
            let listener = tokio::net::TcpListener::from_std(listener)?;
            let incoming = tonic::transport::server::TcpIncoming::from_listener(
                listener,
                true,
                Some(Duration::from_secs(30)),
            )
            .map_err(|e| std::io::Error::other(e.to_string()))?;
            tokio::spawn(
                tonic::transport::Server::builder()
                    .timeout(MAX_CALL_TIME)
                    .add_service(service)
                    .serve_with_incoming_shutdown(incoming, async {
                        let _ = stopped.await;
                    }),
            );
            Ok::<_, std::io::Error>(())
        });
        ready.map_err(|e| ClusterError::Unavailable(format!("cannot serve on {address}: {e}")))?;
        Ok(RpcServer {
            address,
            stop: Some(stop),
            bridge,
        })
    }

    /// Where it listens.
    pub fn address(&self) -> SocketAddr {
        self.address
    }
}

impl Drop for RpcServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        // The bridge's runtime stops with this handle, closing what is left.
        let _ = &self.bridge;
    }
}
