//! Where an archive's segments live: a directory, or a prefix of a bucket in S3-compatible object
//! storage (`s3://bucket/prefix`), so that whichever instance of a fleet leads writes into the one
//! place every instance and every auditor reads.
//!
//! A segment reaches a bucket whole or not at all: it is written and synced to a local spool file,
//! uploaded, and only then is its manifest uploaded beside it, as a directory gets the file renamed
//! into place before its manifest. Reading a segment from a bucket downloads it to a local file
//! first, which the verifier and the proof read as they read a directory's.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use futures_util::StreamExt;
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path as Key;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use tokio::io::AsyncWriteExt;

use crate::error::{LedgerError, Result};
use crate::export::{self, Manifest};

/// An archive: a directory, or a prefix in a bucket.
#[derive(Debug)]
pub enum Place {
    Dir(PathBuf),
    Bucket(Bucket),
}

impl Place {
    /// `s3://bucket/prefix` names a bucket (its endpoint, region and credentials come from the
    /// usual `AWS_*` environment variables); anything else a directory.
    pub fn parse(s: &str) -> Result<Place> {
        match s.split_once("://") {
            Some(("s3", rest)) => Bucket::open(s, rest).map(Place::Bucket),
            _ => dir(s).map(Place::Dir),
        }
    }

    /// The directory `s` names, or `None` for a bucket: checked as [`Place::parse`] checks it,
    /// without starting the bucket's client (a configuration check, made at each reload).
    pub fn check_name(s: &str) -> Result<Option<PathBuf>> {
        match s.split_once("://") {
            Some(("s3", rest)) => Bucket::store(s, rest).map(|_| None),
            _ => dir(s).map(Some),
        }
    }

    /// Whether the archive can be written to and read: a directory must exist (it is not made
    /// here: a mistyped path would otherwise become an archive nobody reads).
    pub fn check(&self) -> Result<()> {
        match self {
            Place::Dir(d) if !d.is_dir() => Err(LedgerError::Io(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("archive directory {} does not exist", d.display()),
            ))),
            _ => Ok(()),
        }
    }

    /// Whether anything may be archived here yet: a directory that is not made yet holds nothing.
    pub fn exists(&self) -> bool {
        match self {
            Place::Dir(d) => d.exists(),
            Place::Bucket(_) => true,
        }
    }

    /// The names of the files the archive holds (segments, manifests and whatever else).
    pub(crate) fn names(&self) -> Result<Vec<String>> {
        match self {
            Place::Dir(d) => std::fs::read_dir(d)?
                .map(|e| Ok(e?.file_name().to_string_lossy().into_owned()))
                .collect(),
            Place::Bucket(b) => b.names(),
        }
    }

    /// The manifest of segment `name`; `None` when there is none.
    pub(crate) fn manifest(&self, name: &str) -> Result<Option<Manifest>> {
        let mname = format!("{name}.manifest.json");
        let raw = match self {
            Place::Dir(d) => match std::fs::read(d.join(&mname)) {
                Ok(raw) => raw,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(e.into()),
            },
            Place::Bucket(b) => match b.get(&mname)? {
                Some(raw) => raw,
                None => return Ok(None),
            },
        };
        serde_json::from_slice(&raw)
            .map(Some)
            .map_err(|e| LedgerError::BadExport(format!("{}: {e}", self.join(&mname))))
    }

    /// Segment `name` as a local file to read; `None` when the archive does not hold it.
    pub(crate) fn local(&self, name: &str) -> Result<Option<Local>> {
        match self {
            Place::Dir(d) => {
                let p = d.join(name);
                Ok(p.exists().then_some(Local {
                    path: p,
                    own: false,
                }))
            }
            Place::Bucket(b) => b.download(name),
        }
    }

    /// Where segment `name` is written before [`Place::commit`] puts it in place.
    pub(crate) fn spool(&self, name: &str) -> Local {
        match self {
            Place::Dir(d) => Local {
                path: export::partial(&d.join(name)),
                own: true,
            },
            Place::Bucket(_) => Local::temp(name),
        }
    }

    /// Puts the written, synced `spool` in place as segment `name`.
    pub(crate) fn commit(&self, spool: Local, name: &str) -> Result<()> {
        match self {
            Place::Dir(d) => {
                // Nothing recorded points at this name yet, so what is there is replaced.
                std::fs::rename(&spool.path, d.join(name))?;
                Ok(())
            }
            Place::Bucket(b) => b.upload(&spool.path, name),
        }
    }

    /// Writes segment `name`'s manifest beside it.
    pub(crate) fn put_manifest(&self, name: &str, manifest: &Manifest) -> Result<()> {
        match self {
            Place::Dir(d) => export::write_manifest(&d.join(name), manifest),
            Place::Bucket(b) => {
                let mut raw = serde_json::to_vec_pretty(manifest).map_err(std::io::Error::other)?;
                raw.push(b'\n');
                b.put(&format!("{name}.manifest.json"), raw)
            }
        }
    }

    /// How a message names file `name` of this archive.
    pub(crate) fn join(&self, name: &str) -> String {
        match self {
            Place::Dir(d) => d.join(name).display().to_string(),
            Place::Bucket(b) => format!("{}/{name}", b.url),
        }
    }
}

impl std::fmt::Display for Place {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Place::Dir(d) => write!(f, "{}", d.display()),
            Place::Bucket(b) => f.write_str(&b.url),
        }
    }
}

/// The directory `s` names: anything but a URL (`s3://` names a bucket, any other scheme nothing).
fn dir(s: &str) -> Result<PathBuf> {
    match s.split_once("://") {
        Some((scheme, _)) if !scheme.contains('/') => Err(bad(format!(
            "{s}: archives go to a directory or to s3://bucket/prefix, not {scheme}://"
        ))),
        _ => Ok(PathBuf::from(s)),
    }
}

fn bad(why: String) -> LedgerError {
    LedgerError::Io(std::io::Error::new(std::io::ErrorKind::InvalidInput, why))
}

/// A local file holding a segment: the archive's own, or one this process wrote (a spool or a
/// downloaded copy), removed when dropped unless it was put in place.
#[derive(Debug)]
pub(crate) struct Local {
    pub path: PathBuf,
    own: bool,
}

impl Local {
    fn temp(name: &str) -> Local {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        Local {
            path: std::env::temp_dir().join(format!(".idemgate-{}-{n}-{name}", std::process::id())),
            own: true,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Local {
    fn drop(&mut self) {
        if self.own {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// A prefix in an S3-compatible bucket, with the runtime its client needs (the ledger's callers
/// are threads, not tasks).
pub struct Bucket {
    url: String,
    store: Arc<dyn ObjectStore>,
    prefix: Key,
    rt: Option<tokio::runtime::Runtime>,
}

impl std::fmt::Debug for Bucket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bucket").field("url", &self.url).finish()
    }
}

impl Drop for Bucket {
    fn drop(&mut self) {
        // Dropped on a runtime's thread a runtime may not wait for its own: let it end alone.
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

impl Bucket {
    fn open(url: &str, rest: &str) -> Result<Bucket> {
        let (store, prefix) = Bucket::store(url, rest)?;
        Bucket::with_store(url, prefix, store)
    }

    /// The client of the bucket `rest` (`bucket/prefix`) names, and the prefix.
    fn store<'a>(url: &str, rest: &'a str) -> Result<(AmazonS3, &'a str)> {
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() || bucket.contains(['@', '?', '#', ':']) {
            // Not echoed: what is before an `@` may be a secret.
            return Err(bad(
                "name a bucket and an optional prefix (s3://bucket/prefix); credentials come \
                 from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, never the URL"
                    .into(),
            ));
        }
        // reqwest's rustls takes the process's provider: ring, as everywhere else in idemgate.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let store = AmazonS3Builder::from_env()
            .with_bucket_name(bucket)
            .build()
            .map_err(|e| bad(format!("{url}: {e}")))?;
        Ok((store, prefix))
    }

    /// The prefix `prefix` of the bucket `store` reaches, named `url` in messages.
    fn with_store(url: &str, prefix: &str, store: impl ObjectStore) -> Result<Bucket> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("idemgate-bucket")
            .enable_all()
            .build()?;
        Ok(Bucket {
            url: url.trim_end_matches('/').to_owned(),
            store: Arc::new(store),
            prefix: Key::from(prefix.trim_matches('/')),
            rt: Some(rt),
        })
    }

    fn key(&self, name: &str) -> Key {
        self.prefix.clone().join(name)
    }

    fn failed(&self, name: &str, e: impl std::fmt::Display) -> LedgerError {
        LedgerError::Io(std::io::Error::other(format!("{}/{name}: {e}", self.url)))
    }

    /// Runs `f` on the bucket's runtime and waits for it, from any thread (a task's too).
    fn run<T: Send + 'static>(&self, f: impl Future<Output = T> + Send + 'static) -> Result<T> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let rt = self.rt.as_ref().ok_or(LedgerError::Closed)?;
        rt.spawn(async move {
            let _ = tx.send(f.await);
        });
        rx.recv()
            .map_err(|_| LedgerError::Internal(format!("{}: a request panicked", self.url)))
    }

    fn names(&self) -> Result<Vec<String>> {
        let store = Arc::clone(&self.store);
        let prefix = self.prefix.clone();
        let listed = self.run(async move { store.list_with_delimiter(Some(&prefix)).await })?;
        let listed = listed.map_err(|e| self.failed("", e))?;
        Ok(listed
            .objects
            .into_iter()
            .filter_map(|o| o.location.filename().map(str::to_owned))
            .collect())
    }

    fn get(&self, name: &str) -> Result<Option<Vec<u8>>> {
        let store = Arc::clone(&self.store);
        let key = self.key(name);
        let got = self.run(async move {
            match store.get(&key).await {
                Ok(r) => r.bytes().await.map(Some),
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(e),
            }
        })?;
        got.map(|b| b.map(|b| b.to_vec()))
            .map_err(|e| self.failed(name, e))
    }

    fn put(&self, name: &str, raw: Vec<u8>) -> Result<()> {
        let store = Arc::clone(&self.store);
        let key = self.key(name);
        self.run(async move { store.put(&key, PutPayload::from(raw)).await })?
            .map(|_| ())
            .map_err(|e| self.failed(name, e))
    }

    /// Downloads object `name` to a local file, streamed; `None` when there is no such object.
    fn download(&self, name: &str) -> Result<Option<Local>> {
        let local = Local::temp(name);
        let store = Arc::clone(&self.store);
        let key = self.key(name);
        let path = local.path.clone();
        let got = self.run(async move {
            let r = match store.get(&key).await {
                Ok(r) => r,
                Err(object_store::Error::NotFound { .. }) => return Ok(false),
                Err(e) => return Err(e.to_string()),
            };
            let mut file = tokio::fs::File::create(&path)
                .await
                .map_err(|e| e.to_string())?;
            let mut body = r.into_stream();
            while let Some(chunk) = body.next().await {
                let chunk = chunk.map_err(|e| e.to_string())?;
                file.write_all(&chunk).await.map_err(|e| e.to_string())?;
            }
            file.flush().await.map_err(|e| e.to_string())?;
            Ok(true)
        })?;
        match got {
            Ok(true) => Ok(Some(local)),
            Ok(false) => Ok(None),
            Err(e) => Err(self.failed(name, e)),
        }
    }

    /// Uploads the local file at `from` as object `name`, in parts when it is large: the object
    /// appears whole when the upload completes, or not at all.
    fn upload(&self, from: &Path, name: &str) -> Result<()> {
        let store = Arc::clone(&self.store);
        let key = self.key(name);
        let from = from.to_path_buf();
        self.run(async move {
            let mut file = tokio::fs::File::open(&from)
                .await
                .map_err(|e| e.to_string())?;
            let mut w = object_store::buffered::BufWriter::new(store, key);
            if let Err(e) = tokio::io::copy(&mut file, &mut w).await {
                let _ = w.abort().await;
                return Err(e.to_string());
            }
            w.shutdown().await.map_err(|e| e.to_string())
        })?
        .map_err(|e| self.failed(name, e))
    }
}

#[cfg(test)]
mod tests {
    use sha2::{Digest, Sha256};

    use super::*;

    /// A segment larger than one part of the upload (10 MiB) reaches the bucket whole: the
    /// multipart path, which the archive tests' small segments never take.
    #[test]
    fn a_segment_larger_than_a_part_is_uploaded_whole() {
        let Some(s3) = crate::testing::S3::start("parts") else {
            return;
        };
        let env: Vec<(String, String)> = s3
            .env()
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut builder = AmazonS3Builder::new().with_bucket_name("parts");
        for (k, v) in &env {
            builder = builder.with_config(k.to_ascii_lowercase().parse().expect("a key"), v);
        }
        let bucket = Bucket::with_store(
            "s3://parts/big",
            "big",
            builder.build().expect("the S3 client"),
        )
        .expect("bucket");
        let place = Place::Bucket(bucket);
        let spool = place.spool("events-1-2.ndjson.gz");
        // 25 MiB that do not repeat within a part.
        let mut raw = Vec::with_capacity(25 << 20);
        let mut block = Sha256::digest(b"seed").to_vec();
        while raw.len() < 25 << 20 {
            block = Sha256::digest(&block).to_vec();
            raw.extend_from_slice(&block);
        }
        std::fs::write(spool.path(), &raw).expect("spool");
        place.commit(spool, "events-1-2.ndjson.gz").expect("upload");
        let stored = std::fs::read(s3.object("parts", "big/events-1-2.ndjson.gz")).expect("stored");
        assert_eq!(stored.len(), raw.len());
        assert!(stored == raw, "the object differs from the file");
        let copy = place
            .local("events-1-2.ndjson.gz")
            .expect("download")
            .expect("the object");
        assert!(std::fs::read(copy.path()).expect("copy") == raw);
        assert_eq!(place.names().expect("names"), vec!["events-1-2.ndjson.gz"]);
    }
}
