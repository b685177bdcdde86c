// SPDX-License-Identifier: GPL-2.0

//! In-kernel unit tests (KUnit): what the host tests cannot reach, because it needs the
//! kernel's own headers and helpers. They run when the module is loaded (KTAP in dmesg and
//! in `/sys/kernel/debug/kunit/`).

#[kernel::prelude::kunit_tests(fastreg_verbs)]
mod tests {
    use kernel::page::PAGE_SIZE;

    use crate::{
        rules::limits::DeviceAttrs,
        verbs::inc_rkey, //
    };

    /// `ib_inc_rkey()` changes only the low 8 bits (the key) and wraps them.
    #[test]
    fn inc_rkey_bumps_only_the_key_byte() {
        assert_eq!(inc_rkey(0x1234_5601), 0x1234_5602);
        assert_eq!(inc_rkey(0x1234_56ff), 0x1234_5600);
        assert_eq!(inc_rkey(0xffff_ffff), 0xffff_ff00);
        let mut k = 0xabcd_ef00u32;
        for _ in 0..256 {
            k = inc_rkey(k);
            assert_eq!(k & !0xff, 0xabcd_ef00);
        }
        assert_eq!(k, 0xabcd_ef00);
    }

    /// A device like rxe (512-page lists, 4 KiB..2 GiB pages) is usable with this kernel's
    /// page size; one without fast registration is not.
    #[test]
    fn rxe_like_device_is_usable_with_this_page_size() {
        let rxe = DeviceAttrs {
            mem_mgt_extensions: true,
            max_fast_reg_page_list_len: 512,
            max_qp_wr: 1 << 20,
            max_cqe: (1 << 15) - 1,
            page_size_cap: 0xffff_f000,
            ..DeviceAttrs::default()
        };
        assert!(rxe.check_frwr(PAGE_SIZE as u64).is_ok());
        let no_frwr = DeviceAttrs {
            mem_mgt_extensions: false,
            ..rxe
        };
        assert!(no_frwr.check_frwr(PAGE_SIZE as u64).is_err());
    }
}
