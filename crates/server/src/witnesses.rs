//! Sends each checkpoint of the log's tree the leader keeps to the configured witnesses (C2SP
//! tlog-witness `add-checkpoint`), with the proof that it extends the tree each witness last
//! cosigned, and keeps their cosignatures beside the checkpoint, so that proofs carry them.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use idemgate_config::Witness;
use idemgate_ops::Ops;
use idemgate_proxy::forward::{client, HttpClient};

/// The longest a witness may take to answer.
const TIMEOUT: Duration = Duration::from_secs(10);

pub(crate) struct Witnesses {
    list: Vec<Witness>,
    client: HttpClient,
    /// The size each witness last cosigned, as it said (0 until it says).
    known: Mutex<HashMap<String, u64>>,
}

impl Witnesses {
    pub(crate) fn new(list: Vec<Witness>) -> Witnesses {
        Witnesses {
            list,
            client: client(),
            known: Mutex::new(HashMap::new()),
        }
    }

    /// Offers the newest kept checkpoint to each witness that has not cosigned it. Runs on a
    /// blocking thread of the server's runtime.
    pub(crate) fn send(&self, ops: &Ops) {
        for w in &self.list {
            self.send_to(ops, w);
        }
    }

    fn send_to(&self, ops: &Ops, w: &Witness) {
        let known = || -> u64 {
            let k = self
                .known
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            k.get(&w.url).copied().unwrap_or(0)
        };
        let learn = |size: u64| {
            let mut k = self
                .known
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            k.insert(w.url.clone(), size);
        };
        // A second try when the witness holds another size than the one assumed (at start, or
        // after another instance led).
        for _ in 0..2 {
            let req = match ops.witness_request(known()) {
                Ok(Some(r)) => r,
                Ok(None) => return,
                Err(e) => {
                    tracing::warn!(witness = %w.url, error = %e, "could not prepare a checkpoint for a witness");
                    return;
                }
            };
            let answer = tokio::runtime::Handle::current().block_on(self.post(w, req.body.clone()));
            match answer {
                Ok((200, _, body)) => {
                    for line in body.lines().filter(|l| !l.is_empty()) {
                        if let Err(e) = ops.note_cosignature(req.size, &req.note, &w.key, line) {
                            tracing::warn!(witness = %w.url, error = %e, "a witness's answer is not its cosignature");
                        }
                    }
                    learn(req.size);
                    tracing::info!(witness = %w.url, size = req.size, "cosigned by a witness");
                    return;
                }
                Ok((409, Some(kind), body)) if kind.starts_with("text/x.tlog.size") => {
                    let Ok(size) = body.trim().parse::<u64>() else {
                        return;
                    };
                    learn(size);
                }
                Ok((status, _, body)) => {
                    tracing::warn!(witness = %w.url, status, answer = %body.trim(), size = req.size, "a witness refused the log's checkpoint");
                    return;
                }
                Err(e) => {
                    tracing::warn!(witness = %w.url, error = %e, "could not reach a witness");
                    return;
                }
            }
        }
    }

    /// `POST <url>/add-checkpoint`: the status, the content type and the body.
    async fn post(
        &self,
        w: &Witness,
        body: String,
    ) -> Result<(u16, Option<String>, String), String> {
        let req = http::Request::post(format!("{}/add-checkpoint", w.url))
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| e.to_string())?;
        let resp = tokio::time::timeout(TIMEOUT, self.client.request(req))
            .await
            .map_err(|_| "timed out".to_owned())?
            .map_err(|e| e.to_string())?;
        let status = resp.status().as_u16();
        let kind = resp
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let bytes = tokio::time::timeout(TIMEOUT, resp.into_body().collect())
            .await
            .map_err(|_| "timed out".to_owned())?
            .map_err(|e| e.to_string())?
            .to_bytes();
        Ok((status, kind, String::from_utf8_lossy(&bytes).into_owned()))
    }
}
