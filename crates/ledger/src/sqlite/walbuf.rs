//! A VFS shim over SQLite's default VFS that hands each commit's WAL frames to the kernel in a few
//! `pwrite`s instead of two per frame (its 24-byte header, then its page).
//!
//! SQLite writes a commit's frames at consecutive offsets of the WAL, syncs the WAL, and only then
//! publishes the frames in the WAL index. The shim keeps consecutive writes to a WAL file in a
//! buffer and writes the buffer out before anything that could observe the file or depend on it:
//! a sync, a read, a truncation, a size query, a file control, a fetch, a write elsewhere, and
//! close. So with `synchronous = FULL`, which syncs the WAL at every commit, no frame is published
//! (to this connection, another one or another process) before it is in the file, and nothing is
//! acknowledged before it is durable, as without the shim. A failed write is reported by the call
//! that flushed it, usually the commit's sync, and fails that commit.
//!
//! **Only for connections with `synchronous = FULL` (or `EXTRA`).** Under `NORMAL` a commit
//! publishes frames without a sync, and other connections could read a WAL that does not hold them
//! yet. The ledger opens its writer's connection, and only that one, through the shim
//! (`super::open_writer`).
//!
//! Only files opened as a WAL get the shim's methods. The database file, the journal and the WAL
//! index are the default VFS's own files with its own methods, untouched.
//!
//! Why: SQLite's two `pwrite`s per frame cost a seventh to a quarter of the writer's CPU time; a
//! commit of 73 frames costs ~230 µs of CPU in `pwrite`s and its `fsync` on a 2-core VM, and
//! ~100 µs written in one go.
//!
//! This module is the only `unsafe` code in the workspace (the workspace denies it elsewhere): a
//! VFS is a C interface.
#![allow(unsafe_code)]

use rusqlite::ffi;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::mem::size_of;
use std::ptr;
use std::sync::OnceLock;

/// The name connections pass to open through the shim.
pub const NAME: &CStr = c"idemgate-walbuf";

/// A commit's frames are written out at once up to this size; a bigger transaction in pieces.
const LIMIT: usize = 4 << 20;

/// The default VFS writes at most 128 KiB − 1 bytes a call (`seekAndWriteFd` masks the length
/// with 0x1ffff: a longer write is cut short and then fails as SQLITE_FULL), so the buffer goes out
/// in calls of at most 124 KiB, about 30 frames of 4 KiB pages.
const CHUNK: usize = 0x1f000;

/// The default VFS the shim wraps (its address: it lives for the process).
struct Registered {
    real: usize,
}

static REGISTERED: OnceLock<Result<Registered, c_int>> = OnceLock::new();

/// Registers the shim once per process (not as the default VFS). An error is SQLite's code.
pub fn register() -> Result<(), c_int> {
    REGISTERED
        .get_or_init(|| {
            // SAFETY: sqlite3_vfs_find returns the default VFS, which lives for the process; the
            // copy is leaked so it does too, as sqlite3_vfs_register requires.
            unsafe {
                let real = ffi::sqlite3_vfs_find(ptr::null());
                if real.is_null() {
                    return Err(ffi::SQLITE_ERROR);
                }
                let mut vfs = *real;
                vfs.zName = NAME.as_ptr();
                vfs.pNext = ptr::null_mut();
                vfs.szOsFile = (size_of::<WalFile>() as c_int) + (*real).szOsFile;
                vfs.xOpen = Some(open);
                let leaked: &'static mut ffi::sqlite3_vfs = Box::leak(Box::new(vfs));
                let rc = ffi::sqlite3_vfs_register(leaked, 0);
                if rc != ffi::SQLITE_OK {
                    return Err(rc);
                }
                Ok(Registered {
                    real: real as usize,
                })
            }
        })
        .as_ref()
        .map(|_| ())
        .map_err(|rc| *rc)
}

fn real_vfs() -> *mut ffi::sqlite3_vfs {
    match REGISTERED.get() {
        Some(Ok(r)) => r.real as *mut ffi::sqlite3_vfs,
        _ => ptr::null_mut(),
    }
}

/// A WAL file opened through the shim: its header, then the default VFS's file.
#[repr(C)]
struct WalFile {
    base: ffi::sqlite3_file,
    real: *mut ffi::sqlite3_file,
    buf: *mut Vec<u8>,
    /// The file offset of `buf[0]`.
    start: i64,
}

const _: () = assert!(size_of::<WalFile>().is_multiple_of(8));

unsafe extern "C" fn open(
    _vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    let real = real_vfs();
    let Some(real_open) = (*real).xOpen else {
        return ffi::SQLITE_ERROR;
    };
    if flags & ffi::SQLITE_OPEN_WAL == 0 {
        // The default VFS's file in place, with its own methods: nothing of the shim's.
        return real_open(real, name, file, flags, out_flags);
    }
    let w = file.cast::<WalFile>();
    let inner = file
        .cast::<u8>()
        .add(size_of::<WalFile>())
        .cast::<ffi::sqlite3_file>();
    (*w).base.pMethods = ptr::null();
    let rc = real_open(real, name, inner, flags, out_flags);
    if rc != ffi::SQLITE_OK {
        // Ours stays without methods, so SQLite will not close it: close what the default VFS
        // may have left open.
        if let Some(close) = (*inner).pMethods.as_ref().and_then(|m| m.xClose) {
            close(inner);
        }
        return rc;
    }
    (*w).real = inner;
    (*w).buf = Box::into_raw(Box::new(Vec::new()));
    (*w).start = 0;
    (*w).base.pMethods = &METHODS;
    ffi::SQLITE_OK
}

/// The shim's file and the default VFS's methods for the file inside it.
///
/// SAFETY, for every method below: SQLite calls them only on a file to which [`open`] gave
/// [`METHODS`], from one connection at a time, between that `open` and its `x_close`. So `f` is a
/// `WalFile` whose `real` is the default VFS's open file and whose `buf` is live.
unsafe fn parts<'a>(f: *mut ffi::sqlite3_file) -> (&'a mut WalFile, &'a ffi::sqlite3_io_methods) {
    let w = &mut *f.cast::<WalFile>();
    let m = &*(*w.real).pMethods;
    (w, m)
}

/// Writes the buffer out; empties it whatever the outcome.
unsafe fn flush(w: &mut WalFile, m: &ffi::sqlite3_io_methods) -> c_int {
    let buf = &mut *w.buf;
    if buf.is_empty() {
        return ffi::SQLITE_OK;
    }
    let Some(write) = m.xWrite else {
        buf.clear();
        return ffi::SQLITE_IOERR_WRITE;
    };
    let mut rc = ffi::SQLITE_OK;
    let mut done = 0;
    while done < buf.len() && rc == ffi::SQLITE_OK {
        let n = CHUNK.min(buf.len() - done);
        rc = write(
            w.real,
            buf.as_ptr().add(done).cast::<c_void>(),
            n as c_int,
            w.start + done as i64,
        );
        done += n;
    }
    buf.clear();
    rc
}

/// [`parts`], once the buffer is written out: for every method that reads the file or hands it to
/// the default VFS whole. `Err` is the write's error code.
unsafe fn flushed<'a>(
    f: *mut ffi::sqlite3_file,
) -> Result<(&'a mut WalFile, &'a ffi::sqlite3_io_methods), c_int> {
    let (w, m) = parts(f);
    match flush(w, m) {
        ffi::SQLITE_OK => Ok((w, m)),
        rc => Err(rc),
    }
}

unsafe extern "C" fn x_close(f: *mut ffi::sqlite3_file) -> c_int {
    let (w, m) = parts(f);
    let rc = flush(w, m);
    let closed = m.xClose.map_or(ffi::SQLITE_OK, |close| close(w.real));
    drop(Box::from_raw(w.buf));
    w.buf = ptr::null_mut();
    if rc != ffi::SQLITE_OK {
        rc
    } else {
        closed
    }
}

unsafe extern "C" fn x_read(
    f: *mut ffi::sqlite3_file,
    p: *mut c_void,
    amt: c_int,
    off: ffi::sqlite3_int64,
) -> c_int {
    match flushed(f) {
        Ok((w, m)) => m
            .xRead
            .map_or(ffi::SQLITE_IOERR_READ, |read| read(w.real, p, amt, off)),
        Err(rc) => rc,
    }
}

unsafe extern "C" fn x_write(
    f: *mut ffi::sqlite3_file,
    p: *const c_void,
    amt: c_int,
    off: ffi::sqlite3_int64,
) -> c_int {
    let (w, m) = parts(f);
    let buf = &mut *w.buf;
    if !buf.is_empty() && off != w.start + buf.len() as i64 {
        let rc = flush(w, m);
        if rc != ffi::SQLITE_OK {
            return rc;
        }
    }
    let buf = &mut *w.buf;
    if buf.is_empty() {
        w.start = off;
    }
    buf.extend_from_slice(std::slice::from_raw_parts(p.cast::<u8>(), amt as usize));
    if buf.len() >= LIMIT {
        return flush(w, m);
    }
    ffi::SQLITE_OK
}

unsafe extern "C" fn x_truncate(f: *mut ffi::sqlite3_file, size: ffi::sqlite3_int64) -> c_int {
    match flushed(f) {
        Ok((w, m)) => m
            .xTruncate
            .map_or(ffi::SQLITE_IOERR_TRUNCATE, |t| t(w.real, size)),
        Err(rc) => rc,
    }
}

unsafe extern "C" fn x_sync(f: *mut ffi::sqlite3_file, flags: c_int) -> c_int {
    match flushed(f) {
        Ok((w, m)) => m
            .xSync
            .map_or(ffi::SQLITE_IOERR_FSYNC, |s| s(w.real, flags)),
        Err(rc) => rc,
    }
}

unsafe extern "C" fn x_file_size(
    f: *mut ffi::sqlite3_file,
    size: *mut ffi::sqlite3_int64,
) -> c_int {
    match flushed(f) {
        Ok((w, m)) => m
            .xFileSize
            .map_or(ffi::SQLITE_IOERR_FSTAT, |s| s(w.real, size)),
        Err(rc) => rc,
    }
}

unsafe extern "C" fn x_lock(f: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    let (w, m) = parts(f);
    m.xLock.map_or(ffi::SQLITE_OK, |l| l(w.real, level))
}

unsafe extern "C" fn x_unlock(f: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    let (w, m) = parts(f);
    m.xUnlock.map_or(ffi::SQLITE_OK, |l| l(w.real, level))
}

unsafe extern "C" fn x_check_reserved_lock(f: *mut ffi::sqlite3_file, out: *mut c_int) -> c_int {
    let (w, m) = parts(f);
    m.xCheckReservedLock
        .map_or(ffi::SQLITE_OK, |c| c(w.real, out))
}

unsafe extern "C" fn x_file_control(
    f: *mut ffi::sqlite3_file,
    op: c_int,
    arg: *mut c_void,
) -> c_int {
    match flushed(f) {
        Ok((w, m)) => m
            .xFileControl
            .map_or(ffi::SQLITE_NOTFOUND, |c| c(w.real, op, arg)),
        Err(rc) => rc,
    }
}

unsafe extern "C" fn x_sector_size(f: *mut ffi::sqlite3_file) -> c_int {
    let (w, m) = parts(f);
    m.xSectorSize.map_or(4096, |s| s(w.real))
}

unsafe extern "C" fn x_device_characteristics(f: *mut ffi::sqlite3_file) -> c_int {
    let (w, m) = parts(f);
    m.xDeviceCharacteristics.map_or(0, |d| d(w.real))
}

unsafe extern "C" fn x_shm_map(
    f: *mut ffi::sqlite3_file,
    page: c_int,
    size: c_int,
    extend: c_int,
    pp: *mut *mut c_void,
) -> c_int {
    let (w, m) = parts(f);
    m.xShmMap.map_or(ffi::SQLITE_IOERR_SHMMAP, |s| {
        s(w.real, page, size, extend, pp)
    })
}

unsafe extern "C" fn x_shm_lock(
    f: *mut ffi::sqlite3_file,
    off: c_int,
    n: c_int,
    flags: c_int,
) -> c_int {
    let (w, m) = parts(f);
    m.xShmLock
        .map_or(ffi::SQLITE_IOERR_SHMLOCK, |s| s(w.real, off, n, flags))
}

unsafe extern "C" fn x_shm_barrier(f: *mut ffi::sqlite3_file) {
    let (w, m) = parts(f);
    if let Some(b) = m.xShmBarrier {
        b(w.real);
    }
}

unsafe extern "C" fn x_shm_unmap(f: *mut ffi::sqlite3_file, delete: c_int) -> c_int {
    let (w, m) = parts(f);
    m.xShmUnmap.map_or(ffi::SQLITE_OK, |u| u(w.real, delete))
}

unsafe extern "C" fn x_fetch(
    f: *mut ffi::sqlite3_file,
    off: ffi::sqlite3_int64,
    amt: c_int,
    pp: *mut *mut c_void,
) -> c_int {
    let (w, m) = match flushed(f) {
        Ok(parts) => parts,
        Err(rc) => return rc,
    };
    match m.xFetch {
        Some(fetch) if m.iVersion >= 3 => fetch(w.real, off, amt, pp),
        _ => {
            *pp = ptr::null_mut();
            ffi::SQLITE_OK
        }
    }
}

unsafe extern "C" fn x_unfetch(
    f: *mut ffi::sqlite3_file,
    off: ffi::sqlite3_int64,
    p: *mut c_void,
) -> c_int {
    let (w, m) = parts(f);
    match m.xUnfetch {
        Some(unfetch) if m.iVersion >= 3 => unfetch(w.real, off, p),
        _ => ffi::SQLITE_OK,
    }
}

static METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
    iVersion: 3,
    xClose: Some(x_close),
    xRead: Some(x_read),
    xWrite: Some(x_write),
    xTruncate: Some(x_truncate),
    xSync: Some(x_sync),
    xFileSize: Some(x_file_size),
    xLock: Some(x_lock),
    xUnlock: Some(x_unlock),
    xCheckReservedLock: Some(x_check_reserved_lock),
    xFileControl: Some(x_file_control),
    xSectorSize: Some(x_sector_size),
    xDeviceCharacteristics: Some(x_device_characteristics),
    xShmMap: Some(x_shm_map),
    xShmLock: Some(x_shm_lock),
    xShmBarrier: Some(x_shm_barrier),
    xShmUnmap: Some(x_shm_unmap),
    xFetch: Some(x_fetch),
    xUnfetch: Some(x_unfetch),
};

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::{params, Connection, OpenFlags};

    fn writer(path: &std::path::Path) -> Connection {
        register().unwrap();
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE;
        let c = Connection::open_with_flags_and_vfs(path, flags, NAME).unwrap();
        c.pragma_update(None, "journal_mode", "WAL").unwrap();
        c.pragma_update(None, "synchronous", "FULL").unwrap();
        c
    }

    fn blob(id: i64, len: usize) -> Vec<u8> {
        (0..len).map(|i| (i as i64 * 31 + id) as u8).collect()
    }

    /// Commits of every size (more than one call of the default VFS can write, more than the
    /// buffer holds), and a transaction bigger than the page cache, which spills frames and then
    /// writes some of them again in place: each commit is read back by another connection (the
    /// default VFS) as soon as it returns, and the file is intact after the writer closes.
    #[test]
    fn every_commit_is_in_the_wal_when_another_connection_looks() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let w = writer(&path);
        w.execute_batch("CREATE TABLE t (id INTEGER PRIMARY KEY, b BLOB NOT NULL)")
            .unwrap();
        let r = Connection::open(&path).unwrap();
        let sizes = [1, 4096, 126_975, 131_072, 600_000, LIMIT + 12_345, 9 << 20];
        for (id, &len) in sizes.iter().enumerate() {
            let id = id as i64;
            w.execute("INSERT INTO t VALUES (?1, ?2)", params![id, blob(id, len)])
                .unwrap();
            let got: Vec<u8> = r
                .query_row("SELECT b FROM t WHERE id = ?1", [id], |row| row.get(0))
                .unwrap();
            assert!(got == blob(id, len), "commit {id} of {len} bytes read back");
        }
        // A page cache of 8 pages: the transaction spills frames into the WAL before its commit,
        // and the updates write some of those frames again at their earlier offsets.
        w.pragma_update(None, "cache_size", 8).unwrap();
        w.execute_batch("BEGIN").unwrap();
        for id in 100..2_100i64 {
            w.execute("INSERT INTO t VALUES (?1, ?2)", params![id, blob(id, 1000)])
                .unwrap();
        }
        w.execute("UPDATE t SET b = randomblob(1001) WHERE id >= 100", [])
            .unwrap();
        w.execute_batch("COMMIT").unwrap();
        let spilled: i64 = r
            .query_row(
                "SELECT count(*) FROM t WHERE id >= 100 AND length(b) = 1001",
                [],
                |row| row.get(0),
            )
            .unwrap();
        assert_eq!(spilled, 2_000);
        drop(w);
        drop(r);

        let c = Connection::open(&path).unwrap();
        let check: String = c
            .query_row("PRAGMA integrity_check", [], |row| row.get(0))
            .unwrap();
        assert_eq!(check, "ok");
        for (id, &len) in sizes.iter().enumerate() {
            let got: Vec<u8> = c
                .query_row("SELECT b FROM t WHERE id = ?1", [id as i64], |row| {
                    row.get(0)
                })
                .unwrap();
            assert!(got == blob(id as i64, len), "row {id} after reopening");
        }
    }
}
