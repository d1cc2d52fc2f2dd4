//! Concurrent `eth_call`s sent together.
//!
//! Each verification simulates its payment with one `eth_call`. Under load many run at once, and
//! each lone call costs both sides an HTTP request: anvil 1.7 spent about 360 µs of CPU per
//! `balanceOf` call sent one after another, 45 µs per call in batches of 16. So at most
//! [`ON_THE_WIRE`] requests are out at once; calls that arrive meanwhile wait, and go together in
//! one JSON-RPC batch as soon as one of those requests comes back. A call never waits while the
//! wire has room, so a quiet facilitator sends each call alone, as before, and a busy one sends
//! fewer, larger requests. (`scripts/bench-load`, EIP-3009 verifies on anvil, batches against
//! none in alternated runs: 1.11–1.35× the verifies per second at 32 and 64 connections, 0.64–0.82×
//! the daemon's CPU per verify; at 8 connections about the same.)
//!
//! Every call in a batch runs against the node's latest block, as a lone call does; a call's
//! answer (its output, or the node's refusal) is its own. A node that refuses a batch or leaves
//! calls of it unanswered (one that does not take batches) is sent the calls it left again,
//! alone, and every call alone for [`ALONE_FOR`].

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::time::Instant;
use tollgate_protocol::redact::redact_urls;

use alloy::primitives::Bytes;
use alloy::providers::{Provider as _, RootProvider};
use alloy::rpc::types::TransactionRequest;
use alloy::transports::{RpcError, TransportErrorKind, TransportResult};
use tokio::sync::oneshot;

/// Requests to the node out at once before calls wait to go together. Measured against anvil on
/// 2 cores (`scripts/bench-load`, alternated runs): 2 and 4 alike, 1 slower by up to 8%; more
/// lets a node with more cores run more calls side by side.
pub const ON_THE_WIRE: usize = 4;
/// Calls in one batch, at most (a node may bound its batches; 100 is a common bound).
const MOST_PER_BATCH: usize = 100;
/// How long calls go alone after a node did not answer a batch whole.
const ALONE_FOR: Duration = Duration::from_secs(600);

/// The calls of one node's connection: how many requests are out, and who waits.
pub(super) struct Coalescer {
    state: Mutex<State>,
    /// How long a batch may take before its calls are told it failed.
    limit: Duration,
}

#[derive(Default)]
struct State {
    /// Requests out (lone calls, or a task sending batches one after another).
    out: usize,
    /// Calls waiting for a batch.
    waiting: Vec<Waiting>,
    /// The node did not answer a batch whole: every call goes alone until then.
    alone_until: Option<Instant>,
}

/// How a call goes.
enum Go {
    /// Alone, outside the count (the node takes no batches for now).
    Alone(TransactionRequest),
    /// Alone, in one of the places on the wire.
    OnTheWire(TransactionRequest),
    /// In a batch: its answer comes here.
    Batched(oneshot::Receiver<TransportResult<Bytes>>),
}

struct Waiting {
    call: TransactionRequest,
    answer: oneshot::Sender<TransportResult<Bytes>>,
}

impl Coalescer {
    pub(super) fn new(limit: Duration) -> Self {
        Self { state: Mutex::default(), limit }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Nothing panics while holding it; were it poisoned, the counts are still whole.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `call` run by the node (`eth_call` at its latest block): alone while the wire has room,
    /// else in the next batch.
    pub(super) async fn call(
        self: &Arc<Self>,
        provider: &RootProvider,
        call: TransactionRequest,
    ) -> TransportResult<Bytes> {
        let waiting = {
            let mut state = self.lock();
            if state.alone_until.is_some_and(|until| Instant::now() < until) {
                Go::Alone(call)
            } else if state.out < ON_THE_WIRE {
                state.out += 1;
                Go::OnTheWire(call)
            } else {
                let (answer, answered) = oneshot::channel();
                state.waiting.push(Waiting { call, answer });
                Go::Batched(answered)
            }
        };
        match waiting {
            Go::Alone(call) => provider.call(call).await,
            Go::Batched(answered) => answered.await.unwrap_or_else(|_| Err(unanswered())),
            Go::OnTheWire(call) => {
                // Handed on when this call ends, answered or dropped (its client went away).
                let _turn = Turn { coalescer: Arc::clone(self), provider };
                provider.call(call).await
            }
        }
    }

    /// The next batch for a request that came back: the calls waiting (up to
    /// [`MOST_PER_BATCH`]), or `None` and one request fewer out.
    fn next_batch(&self) -> Option<Vec<Waiting>> {
        let mut state = self.lock();
        // A caller that left wants no answer: its call is not sent.
        state.waiting.retain(|w| !w.answer.is_closed());
        if state.waiting.is_empty() {
            state.out -= 1;
            return None;
        }
        let take = state.waiting.len().min(MOST_PER_BATCH);
        Some(state.waiting.drain(..take).collect())
    }

    /// Sends batches while calls wait, then gives its place on the wire back.
    async fn drive(self: Arc<Self>, provider: RootProvider, mut batch: Vec<Waiting>) {
        loop {
            self.send(&provider, batch).await;
            match self.next_batch() {
                Some(next) => batch = next,
                None => return,
            }
        }
    }

    /// One batch sent, and each call told its own answer.
    async fn send(&self, provider: &RootProvider, batch: Vec<Waiting>) {
        if let [_] = batch.as_slice() {
            for w in batch {
                self.alone(provider, w).await;
            }
            return;
        }
        let mut request = alloy::rpc::client::BatchRequest::new(provider.client());
        let mut pending = Vec::with_capacity(batch.len());
        for w in batch {
            match request.add_call::<_, Bytes>("eth_call", &(&w.call,)) {
                Ok(waiter) => pending.push((w, waiter)),
                Err(e) => {
                    let _ = w.answer.send(Err(e));
                }
            }
        }
        let sent = tokio::time::timeout(self.limit, request.send()).await;
        let mut left = Vec::new();
        for (w, waiter) in pending {
            match &sent {
                Err(_) => {
                    let _ = w.answer.send(Err(late()));
                }
                // The node refused the batch as a whole (some answer batches with an HTTP
                // error): each call goes alone.
                Ok(Err(_)) => left.push(w),
                // Answered (or left out, which the waiter says at once).
                Ok(Ok(())) => match waiter.await {
                    Err(RpcError::Transport(TransportErrorKind::MissingBatchResponse(_))) => left.push(w),
                    answer => {
                        let _ = w.answer.send(answer);
                    }
                },
            }
        }
        if left.is_empty() {
            return;
        }
        let why = match &sent {
            Ok(Err(e)) => redact_urls(&e.to_string()),
            _ => "calls left unanswered".to_owned(),
        };
        tracing::warn!(
            calls = left.len(),
            why,
            "the EVM node did not answer a batch: calls are sent alone for the next {} minutes",
            ALONE_FOR.as_secs() / 60
        );
        self.lock().alone_until = Some(Instant::now() + ALONE_FOR);
        futures_util::future::join_all(left.into_iter().map(|w| self.alone(provider, w))).await;
    }

    /// A waiting call sent alone, and told its answer.
    async fn alone(&self, provider: &RootProvider, w: Waiting) {
        let answer = tokio::time::timeout(self.limit, provider.call(w.call)).await;
        let _ = w.answer.send(answer.unwrap_or_else(|_| Err(late())));
    }
}

/// A lone call's place on the wire: given to the calls waiting when it ends.
struct Turn<'a> {
    coalescer: Arc<Coalescer>,
    provider: &'a RootProvider,
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        let Some(batch) = self.coalescer.next_batch() else { return };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(Arc::clone(&self.coalescer).drive(self.provider.clone(), batch));
            }
            // The runtime is going away: the calls waiting are told so (their answers dropped),
            // and the place is given back.
            Err(_) => {
                drop(batch);
                self.coalescer.lock().out -= 1;
            }
        }
    }
}

fn unanswered() -> alloy::transports::TransportError {
    TransportErrorKind::custom_str("the batch this call went in was not sent")
}

fn late() -> alloy::transports::TransportError {
    TransportErrorKind::custom_str("the node did not answer the batch in time")
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy::primitives::Address;
    use serde_json::{Value, json};

    /// How the stand-in node answers a batch.
    #[derive(Clone, Copy, PartialEq)]
    enum Batches {
        Answered,
        /// HTTP 400, as some gateways answer an array.
        Refused,
        /// Only the first half of its calls answered.
        Half,
    }

    /// A stand-in node: answers each `eth_call` with its own input (`0xdead` reverts), holds every
    /// request until opened, and records each request's size (1 for a lone call).
    struct Node {
        url: String,
        sizes: Arc<Mutex<Vec<usize>>>,
        open: tokio::sync::watch::Sender<bool>,
    }

    impl Node {
        async fn start(batches: Batches) -> Self {
            let sizes = Arc::new(Mutex::new(Vec::new()));
            let (open, opened) = tokio::sync::watch::channel(false);
            let seen = sizes.clone();
            let app = axum::Router::new().route(
                "/",
                axum::routing::post(move |axum::Json(body): axum::Json<Value>| {
                    let (seen, mut opened) = (seen.clone(), opened.clone());
                    async move {
                        use axum::response::IntoResponse as _;
                        let calls = body.as_array().cloned();
                        seen.lock().unwrap().push(calls.as_ref().map_or(1, Vec::len));
                        let _ = opened.wait_for(|open| *open).await;
                        match calls {
                            None => axum::Json(answer(&body)).into_response(),
                            Some(_) if batches == Batches::Refused => {
                                (http::StatusCode::BAD_REQUEST, "no batches here").into_response()
                            }
                            Some(calls) => {
                                let kept = if batches == Batches::Half { calls.len() / 2 } else { calls.len() };
                                axum::Json(calls[..kept].iter().map(answer).collect::<Vec<_>>()).into_response()
                            }
                        }
                    }
                }),
            );
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let url = format!("http://{}", listener.local_addr().unwrap());
            tokio::spawn(async move { axum::serve(listener, app).await });
            Self { url, sizes, open }
        }

        fn sizes(&self) -> Vec<usize> {
            let mut sizes = self.sizes.lock().unwrap().clone();
            sizes.sort_unstable();
            sizes
        }
    }

    fn answer(call: &Value) -> Value {
        let input = &call["params"][0]["input"];
        if input == "0xdead" {
            return json!({"jsonrpc": "2.0", "id": call["id"], "error": {"code": 3, "message": "execution reverted"}});
        }
        json!({"jsonrpc": "2.0", "id": call["id"], "result": input})
    }

    fn call_with(input: &[u8]) -> TransactionRequest {
        TransactionRequest::default().to(Address::repeat_byte(1)).input(Bytes::copy_from_slice(input).into())
    }

    /// Waits (on the real clock: the stand-in answers over sockets) until `done` holds.
    async fn until(what: &str, mut done: impl FnMut() -> bool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(std::time::Instant::now() < deadline, "never: {what}");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    type Calls = Vec<tokio::task::JoinHandle<TransportResult<Bytes>>>;

    /// The wire filled with lone calls held by the node, then `inputs` waiting for a batch.
    async fn fill(node: &Node, coalescer: &Arc<Coalescer>, inputs: &[&'static [u8]]) -> Calls {
        let provider = RootProvider::new_http(node.url.parse().unwrap());
        let mut calls = Vec::new();
        for n in 0..ON_THE_WIRE {
            let (c, p) = (coalescer.clone(), provider.clone());
            calls.push(tokio::spawn(async move { c.call(&p, call_with(&[u8::try_from(n).unwrap()])).await }));
        }
        until("the wire is full", || node.sizes.lock().unwrap().len() == ON_THE_WIRE).await;
        for input in inputs {
            let (c, p, call) = (coalescer.clone(), provider.clone(), call_with(input));
            calls.push(tokio::spawn(async move { c.call(&p, call).await }));
        }
        until("the calls wait", || coalescer.lock().waiting.len() == inputs.len()).await;
        calls
    }

    /// Each call's answer, in the order made.
    async fn answers(calls: Calls) -> Vec<Result<Bytes, String>> {
        let mut all = Vec::new();
        for call in calls {
            all.push(
                call.await
                    .unwrap()
                    .map_err(|e| e.as_error_resp().map_or_else(|| e.to_string(), |r| r.message.to_string())),
            );
        }
        all
    }

    fn own_answers(n: usize, inputs: &[&[u8]]) -> Vec<Result<Bytes, String>> {
        let lone = (0..n).map(|i| Ok(Bytes::from(vec![u8::try_from(i).unwrap()])));
        let batched = inputs.iter().map(|i| {
            if *i == [0xde, 0xad] { Err("execution reverted".to_owned()) } else { Ok(Bytes::copy_from_slice(i)) }
        });
        lone.chain(batched).collect()
    }

    const WAITING: [&[u8]; 6] = [b"a", b"b", &[0xde, 0xad], b"c", b"d", b"e"];

    #[tokio::test]
    async fn calls_that_find_the_wire_full_go_in_one_batch_each_with_its_own_answer() {
        let node = Node::start(Batches::Answered).await;
        let coalescer = Arc::new(Coalescer::new(Duration::from_secs(10)));
        let calls = fill(&node, &coalescer, &WAITING).await;
        node.open.send_replace(true);
        assert_eq!(answers(calls).await, own_answers(ON_THE_WIRE, &WAITING), "a revert is its call's own");
        let mut expected = vec![1; ON_THE_WIRE];
        expected.push(WAITING.len());
        assert_eq!(node.sizes(), expected, "the lone calls, then one batch when the first came back");
        until("every place is given back", || coalescer.lock().out == 0).await;

        // A quiet moment: a call goes alone at once.
        let provider = RootProvider::new_http(node.url.parse().unwrap());
        assert_eq!(coalescer.call(&provider, call_with(b"z")).await.unwrap(), Bytes::from_static(b"z"));
        assert_eq!(node.sizes().len(), ON_THE_WIRE + 2);
    }

    #[tokio::test]
    async fn a_node_that_refuses_batches_answers_each_call_alone() {
        let node = Node::start(Batches::Refused).await;
        let coalescer = Arc::new(Coalescer::new(Duration::from_secs(10)));
        let calls = fill(&node, &coalescer, &WAITING).await;
        node.open.send_replace(true);
        assert_eq!(answers(calls).await, own_answers(ON_THE_WIRE, &WAITING));
        let mut expected = vec![1; ON_THE_WIRE + WAITING.len()];
        expected.push(WAITING.len());
        assert_eq!(node.sizes(), expected, "the refused batch, then its calls alone");
        assert!(coalescer.lock().alone_until.is_some());

        // From then on, no batch: ten calls at once, all held by the node, are ten requests.
        node.open.send_replace(false);
        let provider = RootProvider::new_http(node.url.parse().unwrap());
        let before = node.sizes().len();
        let many: Vec<_> = (0..10u8)
            .map(|n| {
                let (c, p) = (coalescer.clone(), provider.clone());
                tokio::spawn(async move { c.call(&p, call_with(&[n])).await })
            })
            .collect();
        until("ten requests reach the node", || node.sizes.lock().unwrap().len() == before + 10).await;
        node.open.send_replace(true);
        for (n, call) in many.into_iter().enumerate() {
            assert_eq!(call.await.unwrap().unwrap(), Bytes::from(vec![u8::try_from(n).unwrap()]));
        }
        assert_eq!(node.sizes().iter().filter(|s| **s > 1).count(), 1, "the refused batch only");
    }

    #[tokio::test]
    async fn calls_a_node_leaves_out_of_its_answer_are_sent_again_alone() {
        let node = Node::start(Batches::Half).await;
        let coalescer = Arc::new(Coalescer::new(Duration::from_secs(10)));
        let calls = fill(&node, &coalescer, &WAITING).await;
        node.open.send_replace(true);
        assert_eq!(answers(calls).await, own_answers(ON_THE_WIRE, &WAITING));
        let mut expected = vec![1; ON_THE_WIRE + WAITING.len() / 2];
        expected.push(WAITING.len());
        assert_eq!(node.sizes(), expected, "half answered in the batch, the other half alone");
    }

    #[tokio::test]
    async fn a_call_whose_caller_left_is_not_sent() {
        let node = Node::start(Batches::Answered).await;
        let coalescer = Arc::new(Coalescer::new(Duration::from_secs(10)));
        let mut calls = fill(&node, &coalescer, &[b"a", b"b", b"c"]).await;
        let gone = calls.remove(ON_THE_WIRE + 1);
        gone.abort();
        assert!(gone.await.unwrap_err().is_cancelled());
        node.open.send_replace(true);
        assert_eq!(answers(calls).await, own_answers(ON_THE_WIRE, &[b"a", b"c"]));
        let mut expected = vec![1; ON_THE_WIRE];
        expected.push(2);
        assert_eq!(node.sizes(), expected);
        until("every place is given back", || coalescer.lock().out == 0).await;
    }
}
