/* The GPUs the stand-in libcuda shows, and the calls a scenario forbids (tests/stubs/README.md).
 * Included once, by libcuda.c (after MAX_GPUS and the CUDA_ERROR_* codes; FORBID expands its
 * LOGRET), as stub.h is: every function is static.
 *
 * - The visible GPUs: the `gpu` lines CUDA_VISIBLE_DEVICES lets through, read by cuInit as CUDA
 *   reads it (UUIDs, UUID prefixes or line indices, in the order given, up to the first entry
 *   that names no GPU; unset, every GPU). Ordinals are those of the visible GPUs.
 * - `forbid CALL...` (`contexts`: every call that creates or makes current a context, or
 *   allocates): a named call logs `FORBIDDEN <call>` and fails with CUDA_ERROR_INVALID_VALUE. */
#ifndef GDRDOCTOR_CUDA_GPUS_H
#define GDRDOCTOR_CUDA_GPUS_H

#include "stub.h"

/* The `gpu` line of each visible ordinal, set by cuInit. */
static int line_of_[MAX_GPUS];
static int nvisible_;
static pthread_mutex_t gpus_lock_ = PTHREAD_MUTEX_INITIALIZER;

/* The `gpu` lines of the scenario. */
static int gpu_lines(void)
{
	int n = stub_count("gpu");
	if (n > MAX_GPUS)
		stub_die("%s: more than %d gpus", stub_path_, MAX_GPUS);
	return n;
}

/* The visible GPUs (after cuInit). */
static int ngpus(void)
{
	pthread_mutex_lock(&gpus_lock_);
	int n = nvisible_;
	pthread_mutex_unlock(&gpus_lock_);
	return n;
}

/* The `gpu` line index of a visible ordinal, or -1. */
static int line_index(int ordinal)
{
	pthread_mutex_lock(&gpus_lock_);
	int line = ordinal >= 0 && ordinal < nvisible_ ? line_of_[ordinal] : -1;
	pthread_mutex_unlock(&gpus_lock_);
	return line;
}

/* The `gpu` line of a visible ordinal. */
static const struct stub_line *gpu(int ordinal)
{
	int line = line_index(ordinal);
	return line < 0 ? NULL : stub_nth("gpu", line);
}

/* The `gpu` line CUDA_VISIBLE_DEVICES entry `e` names (a UUID or its prefix, or an index), or
 * -1. */
static int named_gpu(const char *e, int lines)
{
	char *end = NULL;
	long i = strtol(e, &end, 10);
	if (end != e && !*end)
		return i >= 0 && i < lines ? (int)i : -1;
	for (int k = 0; k < lines; k++) {
		char uuid[96];
		stub_gpu_uuid(k, uuid, sizeof uuid);
		if (!strncmp(uuid, e, strlen(e)))
			return k;
	}
	return -1;
}

/* The visible GPUs' lines, in ordinal order; their number. */
static int visible_gpus(int *out)
{
	int lines = gpu_lines();
	const char *v = getenv("CUDA_VISIBLE_DEVICES");
	if (!v) {
		for (int k = 0; k < lines; k++)
			out[k] = k;
		return lines;
	}
	char buf[4096];
	snprintf(buf, sizeof buf, "%s", v);
	int n = 0;
	for (char *save = NULL, *e = strtok_r(buf, ",", &save); e && n < MAX_GPUS;
	     e = strtok_r(NULL, ",", &save)) {
		int k = named_gpu(e, lines);
		if (k < 0)
			break;
		int dup = 0;
		for (int j = 0; j < n; j++)
			dup |= out[j] == k;
		if (!dup)
			out[n++] = k;
	}
	return n;
}

/* The calls `forbid contexts` names. */
static const char *const context_calls_[] = {
	"cuCtxCreate",	 "cuDevicePrimaryCtxRetain", "cuCtxSetCurrent", "cuCtxPushCurrent",
	"cuMemAlloc",	 "cuMemAllocManaged",	     "cuMemHostAlloc",	"cuMemHostRegister",
	"cuMemCreate",	 NULL,
};

/* Whether a `forbid` line names `call` (or `contexts`, and `call` is one of those). */
static int forbidden(const char *call)
{
	for (int n = 0;; n++) {
		const struct stub_line *l = stub_nth("forbid", n);
		if (!l)
			return 0;
		for (int i = 1; i < l->nwords; i++) {
			if (!strcmp(l->words[i], call))
				return 1;
			if (!strcmp(l->words[i], "contexts"))
				for (const char *const *c = context_calls_; *c; c++)
					if (!strcmp(*c, call))
						return 1;
		}
	}
}

#define FORBID(call)                                                                      \
	do {                                                                              \
		if (forbidden(call))                                                      \
			LOGRET(CUDA_ERROR_INVALID_VALUE, "FORBIDDEN %s", call);            \
	} while (0)

/* cuInit: the visible GPUs, from CUDA_VISIBLE_DEVICES as it is now. */
static void set_visible(void)
{
	int lines[MAX_GPUS];
	int n = visible_gpus(lines);
	pthread_mutex_lock(&gpus_lock_);
	memcpy(line_of_, lines, sizeof lines[0] * (size_t)n);
	nvisible_ = n;
	pthread_mutex_unlock(&gpus_lock_);
}

#endif
