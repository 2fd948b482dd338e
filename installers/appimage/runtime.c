/*
 * MirbadLLM's AppImage runtime (type 2 layout): this ELF, then a squashfs image of the AppDir.
 *
 * The AppImage project's own runtime mounts the image with FUSE, which many current distributions
 * no longer ship (libfuse2). This one needs no FUSE: on first start it extracts the image once into
 * the user's cache (~/.cache/mirbadllm/appimage/<size>-<mkfs time>/), then runs AppRun from there;
 * later starts go straight to AppRun. `--appimage-extract` writes ./squashfs-root and
 * `--appimage-offset` prints where the image starts, as the standard runtime does.
 *
 * Linked statically against squashfuse's library and its decompressors, so it runs on any
 * x86-64 Linux. Built by installers/appimage.py with `cc -static -Os`.
 */
#define _GNU_SOURCE
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <squashfuse/squashfuse.h>

static off_t image_offset(const char *self) {
    /* The image starts where the ELF ends: after its section header table. */
    Elf64_Ehdr header;
    int fd = open(self, O_RDONLY);
    if (fd < 0 || pread(fd, &header, sizeof header, 0) != (ssize_t)sizeof header) {
        if (fd >= 0) close(fd);
        return -1;
    }
    close(fd);
    return (off_t)(header.e_shoff + (Elf64_Off)header.e_shentsize * header.e_shnum);
}

static int mkdirs(char *path, mode_t mode) {
    for (char *p = path + 1; *p; p++) {
        if (*p == '/') {
            *p = 0;
            if (mkdir(path, 0755) != 0 && errno != EEXIST) return -1;
            *p = '/';
        }
    }
    return (mkdir(path, mode) == 0 || errno == EEXIST) ? 0 : -1;
}

static int write_file(sqfs *fs, sqfs_inode *inode, const char *target) {
    int out = open(target, O_WRONLY | O_CREAT | O_TRUNC, inode->base.mode & 07777);
    if (out < 0) return -1;
    static char buffer[1 << 17];
    sqfs_off_t done = 0, total = (sqfs_off_t)inode->xtra.reg.file_size;
    while (done < total) {
        sqfs_off_t size = total - done < (sqfs_off_t)sizeof buffer ? total - done : (sqfs_off_t)sizeof buffer;
        if (sqfs_read_range(fs, inode, done, &size, buffer) != SQFS_OK || size <= 0) break;
        if (write(out, buffer, (size_t)size) != (ssize_t)size) break;
        done += size;
    }
    close(out);
    return done == total ? 0 : -1;
}

static int extract(const char *image, off_t offset, const char *into) {
    sqfs fs;
    if (sqfs_open_image(&fs, image, (size_t)offset) != SQFS_OK) {
        fprintf(stderr, "mirbadllm: %s holds no readable image at offset %lld\n", image, (long long)offset);
        return -1;
    }
    sqfs_traverse trv;
    sqfs_err err = sqfs_traverse_open(&trv, &fs, sqfs_inode_root(&fs));
    char target[PATH_MAX];
    int failed = err != SQFS_OK;
    while (!failed && sqfs_traverse_next(&trv, &err)) {
        if (trv.dir_end) continue;
        sqfs_inode inode;
        if (sqfs_inode_get(&fs, &inode, trv.entry.inode) != SQFS_OK) { failed = 1; break; }
        if (snprintf(target, sizeof target, "%s/%s", into, trv.path) >= (int)sizeof target) { failed = 1; break; }
        switch (inode.base.inode_type) {
        case SQUASHFS_DIR_TYPE: case SQUASHFS_LDIR_TYPE:
            failed = mkdirs(target, 0755) != 0;
            break;
        case SQUASHFS_REG_TYPE: case SQUASHFS_LREG_TYPE:
            failed = write_file(&fs, &inode, target) != 0;
            break;
        case SQUASHFS_SYMLINK_TYPE: case SQUASHFS_LSYMLINK_TYPE: {
            char link[PATH_MAX];
            size_t size = sizeof link;
            failed = sqfs_readlink(&fs, &inode, link, &size) != SQFS_OK || symlink(link, target) != 0;
            break;
        }
        default:  /* devices, fifos and sockets have no place in an AppDir */
            break;
        }
        if (failed) fprintf(stderr, "mirbadllm: cannot extract %s: %s\n", target, strerror(errno));
    }
    sqfs_traverse_close(&trv);
    sqfs_destroy(&fs);
    return failed || err != SQFS_OK ? -1 : 0;
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st; (void)flag; (void)ftw;
    return remove(path);
}

static int cache_dir(const char *image, off_t offset, char *out, size_t cap) {
    sqfs fs;
    if (sqfs_open_image(&fs, image, (size_t)offset) != SQFS_OK) return -1;
    unsigned long stamp = (unsigned long)fs.sb.mkfs_time;
    unsigned long long bytes = (unsigned long long)fs.sb.bytes_used;
    sqfs_destroy(&fs);
    const char *base = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    int n = base && *base ? snprintf(out, cap, "%s/mirbadllm/appimage/%llu-%lu", base, bytes, stamp)
                          : snprintf(out, cap, "%s/.cache/mirbadllm/appimage/%llu-%lu", home ? home : "/tmp", bytes, stamp);
    return n > 0 && (size_t)n < cap ? 0 : -1;
}

int main(int argc, char **argv) {
    char self[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0) { perror("mirbadllm: /proc/self/exe"); return 127; }
    self[len] = 0;
    off_t offset = image_offset(self);
    if (offset <= 0) { fprintf(stderr, "mirbadllm: %s is not an ELF with an image\n", self); return 127; }
    if (argc > 1 && strcmp(argv[1], "--appimage-offset") == 0) {
        printf("%lld\n", (long long)offset);
        return 0;
    }
    if (argc > 1 && strcmp(argv[1], "--appimage-extract") == 0) {
        char into[] = "squashfs-root";
        if (mkdirs(into, 0755) != 0) { perror("mirbadllm: squashfs-root"); return 1; }
        return extract(self, offset, "squashfs-root") == 0 ? 0 : 1;
    }
    char dir[PATH_MAX], done[PATH_MAX + 16], app_run[PATH_MAX + 16];
    if (cache_dir(self, offset, dir, sizeof dir) != 0) { fprintf(stderr, "mirbadllm: no image in %s\n", self); return 127; }
    snprintf(done, sizeof done, "%s/.complete", dir);
    if (access(done, F_OK) != 0) {
        char work[PATH_MAX + 32];
        snprintf(work, sizeof work, "%s.%d", dir, (int)getpid());
        if (mkdirs(work, 0755) != 0 || extract(self, offset, work) != 0) {
            fprintf(stderr, "mirbadllm: could not unpack into %s\n", work);
            return 127;
        }
        char marker[PATH_MAX + 48];
        snprintf(marker, sizeof marker, "%s/.complete", work);
        close(open(marker, O_WRONLY | O_CREAT, 0644));
        if (rename(work, dir) != 0) {
            nftw(work, remove_one, 16, FTW_DEPTH | FTW_PHYS);
            if (access(done, F_OK) != 0) {  /* not another start that got there first */
                perror("mirbadllm: rename");
                return 127;
            }
        }
    }
    snprintf(app_run, sizeof app_run, "%s/AppRun", dir);
    setenv("APPIMAGE", self, 1);
    setenv("APPDIR", dir, 1);
    setenv("ARGV0", argv[0], 1);
    argv[0] = app_run;
    execv(app_run, argv);
    perror("mirbadllm: AppRun");
    return 127;
}
