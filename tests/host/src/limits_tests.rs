// SPDX-License-Identifier: GPL-2.0

//! Tests of `src/rules/limits.rs`.

use crate::rules::limits::{DeviceAttrs, Unsupported};

fn rxe() -> DeviceAttrs {
    DeviceAttrs {
        mem_mgt_extensions: true,
        max_fast_reg_page_list_len: 512,
        max_qp_wr: 1 << 20,
        max_send_sge: 32,
        max_recv_sge: 32,
        max_sge_rd: 32,
        max_cqe: (1 << 15) - 1,
        max_mr: 524287,
        max_qp_rd_atom: 128,
        page_size_cap: 0xffff_f000,
        ..DeviceAttrs::default()
    }
}

#[test]
fn rxe_is_usable_with_4k_and_64k_pages() {
    assert_eq!(rxe().check_frwr(4096), Ok(()));
    assert_eq!(rxe().check_frwr(65536), Ok(()));
}

#[test]
fn each_missing_capability_is_named() {
    let a = DeviceAttrs {
        mem_mgt_extensions: false,
        ..rxe()
    };
    assert_eq!(a.check_frwr(4096), Err(Unsupported::NoMemMgtExtensions));
    assert_eq!(
        a.check_frwr(4096).unwrap_err().to_string(),
        "no fast registration (IB_DEVICE_MEM_MGT_EXTENSIONS missing)"
    );
    let a = DeviceAttrs {
        max_fast_reg_page_list_len: 0,
        ..rxe()
    };
    assert_eq!(a.check_frwr(4096), Err(Unsupported::NoPageList));
    // siw advertises exactly PAGE_SIZE: a 64K-page host with a 4K-only device fails.
    let a = DeviceAttrs {
        page_size_cap: 4096,
        ..rxe()
    };
    assert_eq!(
        a.check_frwr(65536),
        Err(Unsupported::PageSize { page_size: 65536 })
    );
    let a = DeviceAttrs {
        max_qp_wr: 15,
        ..rxe()
    };
    assert_eq!(a.check_frwr(4096), Err(Unsupported::QueueTooSmall));
}

#[test]
fn attributes_are_logged_as_key_value_pairs() {
    let line = rxe().to_string();
    assert!(line.starts_with("fast_reg=yes max_fast_reg_page_list_len=512 max_qp_wr=1048576 "));
    assert!(line.ends_with("page_size_cap=0xfffff000 sg_gaps=no local_dma_lkey_reserved=no"));
}
