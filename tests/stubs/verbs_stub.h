/* What the stand-in libibverbs and libmlx5 share: the objects libibverbs hands out, each a
 * public rdma-core struct followed by our own fields, so that libmlx5 can recognise them
 * (tests/stubs/README.md). */
#ifndef GDRDOCTOR_VERBS_STUB_H
#define GDRDOCTOR_VERBS_STUB_H

#include "stub.h"
#include <infiniband/verbs.h>

#define STUB_DEVICE_MAGIC 0x6764722d64657631ULL /* "gdr-dev1" */
#define STUB_CONTEXT_MAGIC 0x6764722d63747831ULL /* "gdr-ctx1" */

struct stub_device {
	struct ibv_device dev; /* first: the pointer callers get */
	uint64_t magic;
	int index;
	const struct stub_line *line; /* its `device NAME ...` line */
};

struct stub_context {
	struct ibv_context ctx; /* first: the pointer callers get */
	uint64_t magic;
	struct stub_device *sdev;
};

/* The stand-in device behind `d`, or NULL when `d` is not one of ours. */
static inline struct stub_device *stub_device_of(struct ibv_device *d)
{
	struct stub_device *s = (struct stub_device *)d;
	return s && s->magic == STUB_DEVICE_MAGIC ? s : NULL;
}

static inline struct stub_context *stub_context_of(struct ibv_context *c)
{
	struct stub_context *s = (struct stub_context *)c;
	return s && s->magic == STUB_CONTEXT_MAGIC ? s : NULL;
}

/* `device NAME ... mlx5=no` makes a non-mlx5 device (mlx5dv_is_supported answers false). */
static inline int stub_device_is_mlx5(const struct stub_device *s)
{
	const char *v = stub_opt(s->line, "mlx5");
	return !v || strcmp(v, "no");
}

#endif
