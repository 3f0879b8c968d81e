//! Preload libraries (`LD_PRELOAD`) that make the disk misbehave under the
//! real binary without root or a device mapper: built from C with the
//! system compiler, each active only while a flag file exists.

use std::path::{Path, PathBuf};

/// Builds `source` (C) in `dir` as `<name>.so`.
fn build(dir: &Path, name: &str, source: &str) -> PathBuf {
    let file = dir.join(format!("{name}.c"));
    std::fs::write(&file, source).expect("write the shim");
    let library = dir.join(format!("{name}.so"));
    let built = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&library)
        .arg(&file)
        .arg("-ldl")
        .status()
        .expect("run cc");
    assert!(built.success(), "building the {name} shim");
    library
}

/// `fdatasync` fails with `EIO` while the file named by
/// `STASIS_TEST_EIO_FLAG` exists (a disk that fails a flush).
pub(crate) fn eio(dir: &Path) -> PathBuf {
    build(
        dir,
        "eio",
        r#"#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>
int fdatasync(int fd) {
    const char *flag = getenv("STASIS_TEST_EIO_FLAG");
    if (flag && access(flag, F_OK) == 0) { errno = EIO; return -1; }
    int (*real)(int) = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    return real(fd);
}
"#,
    )
}

/// A full disk under the folders `STASIS_TEST_FULL_DIR` (`:`-separated
/// prefixes) while the file named by `STASIS_TEST_FULL_FLAG` exists: a
/// `write` or `pwrite` to a regular file there that would make it longer
/// fails with `ENOSPC` (writes within a file's size need no new blocks, as
/// on a real disk).
pub(crate) fn full_disk(dir: &Path) -> PathBuf {
    build(
        dir,
        "full",
        r#"#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>
static int full(int fd, off_t offset, size_t count) {
    const char *flag = getenv("STASIS_TEST_FULL_FLAG");
    const char *under = getenv("STASIS_TEST_FULL_DIR");
    if (!flag || !under || access(flag, F_OK) != 0) return 0;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return 0;
    char link[64], path[PATH_MAX];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (n <= 0) return 0;
    path[n] = 0;
    int inside = 0;
    for (const char *p = under; *p;) {
        const char *end = strchr(p, ':');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len && strncmp(path, p, len) == 0) inside = 1;
        p += len + (end ? 1 : 0);
    }
    if (!inside) return 0;
    if (offset < 0) offset = lseek(fd, 0, SEEK_CUR);
    return offset + (off_t)count > st.st_size;
}
ssize_t write(int fd, const void *buf, size_t count) {
    if (full(fd, -1, count)) { errno = ENOSPC; return -1; }
    ssize_t (*real)(int, const void *, size_t) = dlsym(RTLD_NEXT, "write");
    return real(fd, buf, count);
}
ssize_t pwrite64(int fd, const void *buf, size_t count, off_t offset) {
    if (full(fd, offset, count)) { errno = ENOSPC; return -1; }
    ssize_t (*real)(int, const void *, size_t, off_t) = dlsym(RTLD_NEXT, "pwrite64");
    return real(fd, buf, count, offset);
}
ssize_t pwrite(int fd, const void *buf, size_t count, off_t offset) {
    if (full(fd, offset, count)) { errno = ENOSPC; return -1; }
    ssize_t (*real)(int, const void *, size_t, off_t) = dlsym(RTLD_NEXT, "pwrite");
    return real(fd, buf, count, offset);
}
"#,
    )
}
