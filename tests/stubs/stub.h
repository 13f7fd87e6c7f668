/* The scenario file and the call log, shared by the stand-in libraries (tests/stubs/README.md).
 *
 * Each stand-in includes this header (every function is static: the libraries share no state
 * and no symbol). The scenario is the file named by GDRDOCTOR_STUB_SCENARIO, read once per
 * process on first use: one directive per line, whitespace-separated words, `key=value`
 * options, `#` starts a comment. Without the variable the scenario is empty (no devices, no
 * GPUs, every call succeeds). A scenario that cannot be read, or a line this code does not
 * understand, aborts the process with a message naming the file and line: a stand-in never
 * guesses, so a typo in a test cannot turn into a silent pass.
 *
 * Every call a stand-in serves is appended to the file named by GDRDOCTOR_STUB_LOG (when set),
 * one line per call: `<library> <call> <arguments> -> <result>`, then ` VAR=value` for each
 * variable a `log_env` line names. Tests read it to prove what was (or was not) called, and in
 * which environment, e.g. that `check` never creates a CUDA context. */
#ifndef GDRDOCTOR_STUB_H
#define GDRDOCTOR_STUB_H

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STUB_MAX_LINES 1024
#define STUB_MAX_WORDS 24

struct stub_line {
	int no; /* line number in the file */
	int nwords;
	char *words[STUB_MAX_WORDS];
};

static struct stub_line stub_lines_[STUB_MAX_LINES];
static int stub_nlines_;
static const char *stub_path_ = "(no scenario)";
static pthread_once_t stub_once_ = PTHREAD_ONCE_INIT;

__attribute__((noreturn, format(printf, 1, 2))) static inline void stub_die(const char *fmt, ...)
{
	char buf[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	fprintf(stderr, "gdrdoctor stand-in: %s\n", buf);
	fflush(stderr);
	abort();
}

/* The directives every stand-in knows; a line starting with anything else is a typo. */
static const char *const stub_kinds_[] = {
	"device", "port", "gid", "uar", "peer_memory", "memlock", "fail", "hang", "list",
	"gpu", "cuda", "nvml", "forbid", "log_env", "nccl", "nccl_fail", "nccl_hang", "nccl_throttle", NULL,
};

static inline void stub_parse_(void)
{
	const char *path = getenv("GDRDOCTOR_STUB_SCENARIO");
	if (!path || !*path)
		return;
	stub_path_ = path;
	FILE *f = fopen(path, "r");
	if (!f)
		stub_die("cannot read the scenario %s (GDRDOCTOR_STUB_SCENARIO): %s", path,
			 strerror(errno));
	char *line = NULL;
	size_t cap = 0;
	int no = 0;
	while (getline(&line, &cap, f) >= 0) {
		no++;
		char *hash = strchr(line, '#');
		if (hash)
			*hash = 0;
		struct stub_line l = { .no = no };
		for (char *save = NULL, *w = strtok_r(line, " \t\r\n", &save); w;
		     w = strtok_r(NULL, " \t\r\n", &save)) {
			if (l.nwords == STUB_MAX_WORDS)
				stub_die("%s:%d: more than %d words", path, no, STUB_MAX_WORDS);
			l.words[l.nwords] = strdup(w);
			if (!l.words[l.nwords])
				stub_die("out of memory reading %s", path);
			l.nwords++;
		}
		if (!l.nwords)
			continue;
		int known = 0;
		for (const char *const *k = stub_kinds_; *k; k++)
			known |= !strcmp(*k, l.words[0]);
		if (!known)
			stub_die("%s:%d: unknown directive `%s`", path, no, l.words[0]);
		if (stub_nlines_ == STUB_MAX_LINES)
			stub_die("%s: more than %d directives", path, STUB_MAX_LINES);
		stub_lines_[stub_nlines_++] = l;
	}
	free(line);
	fclose(f);
}

static inline void stub_load(void)
{
	pthread_once(&stub_once_, stub_parse_);
}

/* The n-th line (from 0) of directive `kind`, or NULL. */
static inline const struct stub_line *stub_nth(const char *kind, int n)
{
	stub_load();
	for (int i = 0; i < stub_nlines_; i++)
		if (!strcmp(stub_lines_[i].words[0], kind) && n-- == 0)
			return &stub_lines_[i];
	return NULL;
}

static inline int stub_count(const char *kind)
{
	int n = 0;
	while (stub_nth(kind, n))
		n++;
	return n;
}

/* The value of option `key=` on a line, or NULL. */
static inline const char *stub_opt(const struct stub_line *l, const char *key)
{
	size_t k = strlen(key);
	if (!l)
		return NULL;
	for (int i = 1; i < l->nwords; i++)
		if (!strncmp(l->words[i], key, k) && l->words[i][k] == '=')
			return l->words[i] + k + 1;
	return NULL;
}

/* Word `i` of a line (NULL past the end). */
static inline const char *stub_word(const struct stub_line *l, int i)
{
	return l && i < l->nwords ? l->words[i] : NULL;
}

/* A number (decimal, 0x hex); aborts on garbage, naming the line. */
static inline long long stub_num(const struct stub_line *l, const char *s)
{
	char *end = NULL;
	errno = 0;
	long long v = strtoll(s, &end, 0);
	if (errno || !end || *end || end == s)
		stub_die("%s:%d: `%s` is not a number", stub_path_, l ? l->no : 0, s);
	return v;
}

/* Option `key=` as a number, or `dflt` when absent. */
static inline long long stub_opt_num(const struct stub_line *l, const char *key, long long dflt)
{
	const char *v = stub_opt(l, key);
	return v ? stub_num(l, v) : dflt;
}

/* errno names as the scenario spells them (or a plain number). */
static inline int stub_errno(const struct stub_line *l, const char *name)
{
	static const struct {
		const char *name;
		int value;
	} names[] = {
		{ "EPERM", EPERM }, { "ENOENT", ENOENT }, { "EIO", EIO }, { "EBADF", EBADF },
		{ "ENOMEM", ENOMEM }, { "EACCES", EACCES }, { "EFAULT", EFAULT },
		{ "EBUSY", EBUSY }, { "ENODEV", ENODEV }, { "EINVAL", EINVAL },
		{ "ENOSPC", ENOSPC }, { "ENOSYS", ENOSYS }, { "EPROTONOSUPPORT", EPROTONOSUPPORT },
		{ "EOPNOTSUPP", EOPNOTSUPP }, { "ETIMEDOUT", ETIMEDOUT },
		/* Kernel-internal ENOTSUPP, which leaks from the dma-buf attach path. */
		{ "ENOTSUPP", 524 },
	};
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
		if (!strcmp(names[i].name, name))
			return names[i].value;
	return (int)stub_num(l, name);
}

/* What a call is, for matching `fail CALL [device=D] [mem=gpu|host] [type=T] [flags=F]
 * [min_len=N] [max_len=N] errno=E|result=R` lines: the first line whose call and every
 * selector it names match wins. */
struct stub_call {
	const char *call;
	const char *device; /* NULL: no device */
	const char *mem;    /* "gpu", "host", NULL */
	const char *type;   /* UAR type, memory flags...; NULL */
	long long len;      /* -1: no length */
};

static inline const struct stub_line *stub_fail(const struct stub_call *c)
{
	for (int n = 0;; n++) {
		const struct stub_line *l = stub_nth("fail", n);
		if (!l)
			return NULL;
		if (!stub_word(l, 1))
			stub_die("%s:%d: `fail` needs a call name", stub_path_, l->no);
		if (strcmp(stub_word(l, 1), c->call))
			continue;
		const char *v;
		if ((v = stub_opt(l, "device")) && (!c->device || strcmp(v, c->device)))
			continue;
		if ((v = stub_opt(l, "mem")) && (!c->mem || strcmp(v, c->mem)))
			continue;
		if ((v = stub_opt(l, "type")) && (!c->type || strcmp(v, c->type)))
			continue;
		if ((v = stub_opt(l, "min_len")) && (c->len < 0 || c->len < stub_num(l, v)))
			continue;
		if ((v = stub_opt(l, "max_len")) && (c->len < 0 || c->len > stub_num(l, v)))
			continue;
		return l;
	}
}

/* Append one line to GDRDOCTOR_STUB_LOG (one write: lines of concurrent processes do not mix). */
__attribute__((format(printf, 2, 3))) static inline void stub_log(const char *lib, const char *fmt, ...)
{
	const char *path = getenv("GDRDOCTOR_STUB_LOG");
	if (!path || !*path)
		return;
	char buf[1024];
	int n = snprintf(buf, sizeof buf, "%s ", lib);
	va_list ap;
	va_start(ap, fmt);
	n += vsnprintf(buf + n, sizeof buf - (size_t)n - 1, fmt, ap);
	va_end(ap);
	/* `log_env VAR...`: the process's value of each (what a worker was started with). */
	for (int k = 0;; k++) {
		const struct stub_line *l = stub_nth("log_env", k);
		if (!l)
			break;
		for (int i = 1; i < l->nwords && n < (int)sizeof buf - 2; i++) {
			const char *v = getenv(l->words[i]);
			n += snprintf(buf + n, sizeof buf - (size_t)n - 1, " %s=%s", l->words[i],
				      v ? v : "(unset)");
		}
	}
	if (n > (int)sizeof buf - 2)
		n = (int)sizeof buf - 2;
	buf[n++] = '\n';
	int saved = errno;
	int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
	if (fd >= 0) {
		ssize_t w = write(fd, buf, (size_t)n);
		(void)w;
		close(fd);
	}
	errno = saved;
}

/* The UUID of the GPU of `gpu` line `index` (from 0): its `uuid=`, else one made from the
 * index. NVML reports it; libcuda matches CUDA_VISIBLE_DEVICES against it. */
static inline void stub_gpu_uuid(int index, char *buf, size_t cap)
{
	const char *u = stub_opt(stub_nth("gpu", index), "uuid");
	if (u)
		snprintf(buf, cap, "%s", u);
	else
		snprintf(buf, cap, "GPU-5ab1e000-0000-4000-8000-%012x", index);
}

/* `hang LIB [once]`: the library's constructor never returns (a wedged driver: the process
 * must be killed). With `once`, only the first process that loads the library hangs (a marker
 * file beside the scenario records it), so the health check that follows a killed worker runs. */
static inline void stub_maybe_hang(const char *lib)
{
	for (int n = 0;; n++) {
		const struct stub_line *l = stub_nth("hang", n);
		if (!l)
			return;
		if (!stub_word(l, 1) || strcmp(stub_word(l, 1), lib))
			continue;
		if (stub_word(l, 2) && !strcmp(stub_word(l, 2), "once")) {
			char marker[4096];
			snprintf(marker, sizeof marker, "%s.hung-%s", stub_path_, lib);
			int fd = open(marker, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
			if (fd < 0)
				return;
			close(fd);
		}
		stub_log(lib, "load -> hang (pid %d)", (int)getpid());
		for (;;)
			pause();
	}
}

#endif
