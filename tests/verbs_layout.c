/*
 * Layout oracle for src/verbs.rs: prints the size and field offsets of every rdma-core struct
 * the Rust side declares (offset, and size as "field:size"), and the constants it hard-codes, as "key value" lines, from the
 * system's <infiniband/verbs.h> and <infiniband/mlx5dv.h> (Debian: libibverbs-dev).
 * tests/verbs.rs compiles it with `cc`, runs it and compares with offset_of!/size_of.
 *
 * Build with -DHAVE_ACTIVE_SPEED_EX when the headers have ibv_port_attr.active_speed_ex
 * (rdma-core >= 49); the test tries that first and falls back without it.
 */
#include <stddef.h>
#include <stdio.h>
#include <infiniband/verbs.h>
#include <infiniband/mlx5dv.h>

#define SIZE(T, name) printf("%s.size %zu\n", name, sizeof(T))
#define OFF(T, name, f)                                                  \
	printf("%s.%s %zu\n%s.%s:size %zu\n", name, #f, offsetof(T, f), name, \
	       #f, sizeof(((T *)0)->f))
#define CONST(c) printf("const.%s %lld\n", #c, (long long)(c))

int main(void)
{
	SIZE(struct ibv_pd, "ibv_pd");
	OFF(struct ibv_pd, "ibv_pd", context);
	OFF(struct ibv_pd, "ibv_pd", handle);

	SIZE(struct ibv_mr, "ibv_mr");
	OFF(struct ibv_mr, "ibv_mr", context);
	OFF(struct ibv_mr, "ibv_mr", pd);
	OFF(struct ibv_mr, "ibv_mr", addr);
	OFF(struct ibv_mr, "ibv_mr", length);
	OFF(struct ibv_mr, "ibv_mr", handle);
	OFF(struct ibv_mr, "ibv_mr", lkey);
	OFF(struct ibv_mr, "ibv_mr", rkey);

	OFF(struct ibv_context, "ibv_context", device);

	SIZE(struct ibv_port_attr, "ibv_port_attr");
	OFF(struct ibv_port_attr, "ibv_port_attr", state);
	OFF(struct ibv_port_attr, "ibv_port_attr", max_mtu);
	OFF(struct ibv_port_attr, "ibv_port_attr", active_mtu);
	OFF(struct ibv_port_attr, "ibv_port_attr", gid_tbl_len);
	OFF(struct ibv_port_attr, "ibv_port_attr", port_cap_flags);
	OFF(struct ibv_port_attr, "ibv_port_attr", max_msg_sz);
	OFF(struct ibv_port_attr, "ibv_port_attr", bad_pkey_cntr);
	OFF(struct ibv_port_attr, "ibv_port_attr", qkey_viol_cntr);
	OFF(struct ibv_port_attr, "ibv_port_attr", pkey_tbl_len);
	OFF(struct ibv_port_attr, "ibv_port_attr", lid);
	OFF(struct ibv_port_attr, "ibv_port_attr", sm_lid);
	OFF(struct ibv_port_attr, "ibv_port_attr", lmc);
	OFF(struct ibv_port_attr, "ibv_port_attr", max_vl_num);
	OFF(struct ibv_port_attr, "ibv_port_attr", sm_sl);
	OFF(struct ibv_port_attr, "ibv_port_attr", subnet_timeout);
	OFF(struct ibv_port_attr, "ibv_port_attr", init_type_reply);
	OFF(struct ibv_port_attr, "ibv_port_attr", active_width);
	OFF(struct ibv_port_attr, "ibv_port_attr", active_speed);
	OFF(struct ibv_port_attr, "ibv_port_attr", phys_state);
	OFF(struct ibv_port_attr, "ibv_port_attr", link_layer);
	OFF(struct ibv_port_attr, "ibv_port_attr", flags);
	OFF(struct ibv_port_attr, "ibv_port_attr", port_cap_flags2);
#ifdef HAVE_ACTIVE_SPEED_EX
	OFF(struct ibv_port_attr, "ibv_port_attr", active_speed_ex);
#endif

	SIZE(struct ibv_device_attr, "ibv_device_attr");
	OFF(struct ibv_device_attr, "ibv_device_attr", fw_ver);
	OFF(struct ibv_device_attr, "ibv_device_attr", node_guid);
	OFF(struct ibv_device_attr, "ibv_device_attr", sys_image_guid);
	OFF(struct ibv_device_attr, "ibv_device_attr", max_mr_size);
	OFF(struct ibv_device_attr, "ibv_device_attr", page_size_cap);
	OFF(struct ibv_device_attr, "ibv_device_attr", vendor_id);
	OFF(struct ibv_device_attr, "ibv_device_attr", vendor_part_id);
	OFF(struct ibv_device_attr, "ibv_device_attr", hw_ver);
	OFF(struct ibv_device_attr, "ibv_device_attr", max_qp);
	OFF(struct ibv_device_attr, "ibv_device_attr", max_qp_wr);
	OFF(struct ibv_device_attr, "ibv_device_attr", device_cap_flags);
	OFF(struct ibv_device_attr, "ibv_device_attr", max_sge);
	OFF(struct ibv_device_attr, "ibv_device_attr", max_sge_rd);
	OFF(struct ibv_device_attr, "ibv_device_attr", max_cq);
	OFF(struct ibv_device_attr, "ibv_device_attr", max_cqe);
	OFF(struct ibv_device_attr, "ibv_device_attr", max_mr);
	OFF(struct ibv_device_attr, "ibv_device_attr", max_pd);
	OFF(struct ibv_device_attr, "ibv_device_attr", max_qp_rd_atom);
	OFF(struct ibv_device_attr, "ibv_device_attr", max_ee_rd_atom);
	OFF(struct ibv_device_attr, "ibv_device_attr", max_res_rd_atom);
	OFF(struct ibv_device_attr, "ibv_device_attr", max_qp_init_rd_atom);
	OFF(struct ibv_device_attr, "ibv_device_attr", max_ee_init_rd_atom);
	OFF(struct ibv_device_attr, "ibv_device_attr", atomic_cap);
	OFF(struct ibv_device_attr, "ibv_device_attr", max_ee);
	OFF(struct ibv_device_attr, "ibv_device_attr", max_rdd);
	OFF(struct ibv_device_attr, "ibv_device_attr", max_mw);
	OFF(struct ibv_device_attr, "ibv_device_attr", max_raw_ipv6_qp);
	OFF(struct ibv_device_attr, "ibv_device_attr", max_raw_ethy_qp);
	OFF(struct ibv_device_attr, "ibv_device_attr", max_mcast_grp);
	OFF(struct ibv_device_attr, "ibv_device_attr", max_mcast_qp_attach);
	OFF(struct ibv_device_attr, "ibv_device_attr", max_total_mcast_qp_attach);
	OFF(struct ibv_device_attr, "ibv_device_attr", max_ah);
	OFF(struct ibv_device_attr, "ibv_device_attr", max_fmr);
	OFF(struct ibv_device_attr, "ibv_device_attr", max_map_per_fmr);
	OFF(struct ibv_device_attr, "ibv_device_attr", max_srq);
	OFF(struct ibv_device_attr, "ibv_device_attr", max_srq_wr);
	OFF(struct ibv_device_attr, "ibv_device_attr", max_srq_sge);
	OFF(struct ibv_device_attr, "ibv_device_attr", max_pkeys);
	OFF(struct ibv_device_attr, "ibv_device_attr", local_ca_ack_delay);
	OFF(struct ibv_device_attr, "ibv_device_attr", phys_port_cnt);

	SIZE(struct mlx5dv_devx_uar, "mlx5dv_devx_uar");
	OFF(struct mlx5dv_devx_uar, "mlx5dv_devx_uar", reg_addr);
	OFF(struct mlx5dv_devx_uar, "mlx5dv_devx_uar", base_addr);
	OFF(struct mlx5dv_devx_uar, "mlx5dv_devx_uar", page_id);
	OFF(struct mlx5dv_devx_uar, "mlx5dv_devx_uar", mmap_off);
	OFF(struct mlx5dv_devx_uar, "mlx5dv_devx_uar", comp_mask);

	CONST(IBV_ACCESS_LOCAL_WRITE);
	CONST(IBV_ACCESS_REMOTE_WRITE);
	CONST(IBV_ACCESS_REMOTE_READ);
	CONST(IBV_ACCESS_REMOTE_ATOMIC);
	CONST(IBV_ACCESS_RELAXED_ORDERING);
	CONST(IBV_ACCESS_OPTIONAL_RANGE);
	CONST(IBV_PORT_ACTIVE);
	CONST(IBV_LINK_LAYER_INFINIBAND);
	CONST(IBV_LINK_LAYER_ETHERNET);
	CONST(MLX5DV_UAR_ALLOC_TYPE_BF);
	CONST(MLX5DV_UAR_ALLOC_TYPE_NC);
#ifdef MLX5DV_UAR_ALLOC_TYPE_NC_DEDICATED
	CONST(MLX5DV_UAR_ALLOC_TYPE_NC_DEDICATED);
#endif
	return 0;
}
