/* Stand-in libmlx5.so.1: the mlx5 direct verbs gdrdoctor calls (mlx5dv_is_supported, the DEVX
 * UAR), written against the public <infiniband/mlx5dv.h> and exported with rdma-core's symbol
 * versions (libmlx5.map). It recognises the devices and contexts of the stand-in libibverbs
 * (verbs_stub.h) and nothing else, as the real libmlx5 recognises only its own provider's.
 *
 * A UAR is a real mapping of one system page (`uar DEVICE sys_page=4096|65536`, default the
 * host's page), aligned to that page, with the doorbell register `index * 4096 + offset` into
 * it and the firmware page id the scenario names: the shape rdma-core gives it
 * (providers/mlx5/verbs.c:6548-6596: reg_addr = bf->reg, base_addr = bf->uar, page_id,
 * mmap_off). Nothing reads or writes the page but the GPU stand-in when a test allows it.
 *
 * Sources: rdma-core v64.0-61-g691953d8d; Linux 6.1.192. */
#include "verbs_stub.h"

#include <infiniband/mlx5dv.h>
#include <sys/mman.h>

#define LIB "libmlx5"

#ifndef MLX5DV_UAR_ALLOC_TYPE_NC_DEDICATED
#define MLX5DV_UAR_ALLOC_TYPE_NC_DEDICATED (1U << 31) /* rdma-core >= 45 */
#endif

struct stub_uar {
	struct mlx5dv_devx_uar uar; /* first: the pointer callers get */
	void *map;
	size_t map_len;
};

__attribute__((constructor)) static void on_load(void)
{
	stub_maybe_hang(LIB);
}

bool mlx5dv_is_supported(struct ibv_device *device)
{
	struct stub_device *s = stub_device_of(device);
	int yes = s && stub_device_is_mlx5(s);
	stub_log(LIB, "mlx5dv_is_supported %s -> %d", s ? s->dev.name : "?", yes);
	return yes;
}

struct mlx5dv_devx_uar *mlx5dv_devx_alloc_uar(struct ibv_context *context, uint32_t flags)
{
	struct stub_context *sc = stub_context_of(context);
	/* Not an mlx5 context: no dv ops (rdma-core providers/mlx5/verbs.c:6601-6605). */
	if (!sc || !stub_device_is_mlx5(sc->sdev)) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	const char *dev = sc->sdev->dev.name;
	const char *type;
	int cmd;
	if (flags == MLX5DV_UAR_ALLOC_TYPE_BF) {
		type = "bf";
		cmd = 6; /* MLX5_IB_MMAP_ALLOC_WC */
	} else if (flags == MLX5DV_UAR_ALLOC_TYPE_NC) {
		type = "nc";
		cmd = 7; /* MLX5_IB_MMAP_ALLOC_NC */
	} else if (flags == MLX5DV_UAR_ALLOC_TYPE_NC_DEDICATED) {
		type = "nc_dedicated";
		cmd = 7;
	} else {
		/* Flags this libmlx5 does not know (verbs.c:6557-6562); rdma-core < 45 does not
		 * know NC_DEDICATED, which a scenario says with
		 * `fail mlx5dv_devx_alloc_uar type=nc_dedicated errno=EOPNOTSUPP`. */
		errno = EOPNOTSUPP;
		stub_log(LIB, "mlx5dv_devx_alloc_uar %s 0x%x -> NULL errno %d", dev, flags, errno);
		return NULL;
	}
	/* Refusals of the kernel: a BlueFlame UAR without write combining (EOPNOTSUPP: Linux
	 * drivers/infiniband/hw/mlx5/main.c:3530-3532), its mmap (EPERM: main.c:2316-2318). */
	struct stub_call c = { .call = "mlx5dv_devx_alloc_uar", .device = dev, .type = type,
			       .len = -1 };
	const struct stub_line *f = stub_fail(&c);
	if (f) {
		const char *e = stub_opt(f, "errno");
		if (!e)
			stub_die("%s:%d: `fail mlx5dv_devx_alloc_uar` needs errno=", stub_path_, f->no);
		errno = stub_errno(f, e);
		stub_log(LIB, "mlx5dv_devx_alloc_uar %s %s -> NULL errno %d", dev, type, errno);
		return NULL;
	}
	const struct stub_line *l = NULL;
	for (int n = 0; (l = stub_nth("uar", n)); n++)
		if (stub_word(l, 1) && !strcmp(stub_word(l, 1), dev))
			break;
	long long page = sysconf(_SC_PAGESIZE);
	long long sys = stub_opt_num(l, "sys_page", page > 0 ? page : 4096);
	long long index = stub_opt_num(l, "index", 0);
	long long offset = stub_opt_num(l, "offset", 0x800);
	long long page_id = stub_opt_num(l, "page_id", 0x1d);
	if (sys < 4096 || (sys & (sys - 1)) || index < 0 || offset < 0 || offset + 8 > 4096 ||
	    (index + 1) * 4096 > sys || page_id < 0 || page_id > 0xffffffffLL)
		stub_die("%s:%d: uar for %s: sys_page %lld, index %lld, offset 0x%llx, page_id %lld "
			 "do not describe a doorbell inside one system page",
			 stub_path_, l ? l->no : 0, dev, sys, index, offset, page_id);
	struct stub_uar *u = calloc(1, sizeof *u);
	if (!u) {
		errno = ENOMEM;
		return NULL;
	}
	u->map_len = (size_t)(2 * sys);
	u->map = mmap(NULL, u->map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (u->map == MAP_FAILED) {
		free(u);
		errno = ENOMEM;
		return NULL;
	}
	uintptr_t base = ((uintptr_t)u->map + (uintptr_t)sys - 1) & ~((uintptr_t)sys - 1);
	u->uar.base_addr = (void *)base;
	u->uar.reg_addr = (void *)(base + (uintptr_t)(index * 4096 + offset));
	u->uar.page_id = (uint32_t)page_id;
	u->uar.mmap_off = (off_t)((((long long)cmd << 8) | (page_id & 0xff)) * sys);
	u->uar.comp_mask = 0;
	stub_log(LIB, "mlx5dv_devx_alloc_uar %s %s -> page_id %lld reg +0x%llx", dev, type,
		 page_id, index * 4096 + offset);
	return &u->uar;
}

void mlx5dv_devx_free_uar(struct mlx5dv_devx_uar *devx_uar)
{
	struct stub_uar *u = (struct stub_uar *)devx_uar;
	if (!u)
		return;
	munmap(u->map, u->map_len);
	free(u);
}
