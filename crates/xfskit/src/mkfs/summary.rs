//! The geometry summary mkfs.xfs prints before formatting (and alone with `-N`).

use super::geometry::MkfsGeometry;
use xfs_format::sb::{
    XFS_SB_FEAT_INCOMPAT_EXCHRANGE as INCOMPAT_EXCHRANGE,
    XFS_SB_FEAT_INCOMPAT_METADIR as INCOMPAT_METADIR,
    XFS_SB_FEAT_INCOMPAT_PARENT as INCOMPAT_PARENT,
};

const VERSION_SECTORBIT: u16 = 0x0800;

/// Render the geometry exactly like mkfs.xfs's summary block
/// (`meta-data=` ... `realtime =`), ending with a newline: as mkfs.xfs
/// 6.1 prints it, or, when the filesystem has a feature 6.1 does not know
/// (exchange-range, parent pointers, a metadata directory), as 6.15 does
/// (its lines for those features and for realtime groups and zones).
pub fn geometry_summary(g: &MkfsGeometry) -> String {
    let (exchange, parent, metadir) = (
        g.features.incompat & INCOMPAT_EXCHRANGE != 0,
        g.features.incompat & INCOMPAT_PARENT != 0,
        g.features.incompat & INCOMPAT_METADIR != 0,
    );
    let newer = exchange || parent || metadir;
    let name = g.data_name.as_deref().unwrap_or("");
    let f = &g.features;
    let bit = |word: u32, mask: u32| u32::from(word & mask != 0);
    let log_sectsz = if f.versionnum & VERSION_SECTORBIT != 0 {
        u32::from(g.logsectsize)
    } else {
        512
    };
    let mut s = String::new();
    s += &format!(
        "meta-data={name:<22} isize={:<6} agcount={}, agsize={} blks\n",
        g.inodesize, g.agcount, g.agblocks
    );
    s += &format!(
        "         ={:<22} sectsz={:<5} attr=2, projid32bit=1\n",
        "", g.sectsize
    );
    s += &format!(
        "         ={:<22} crc={:<8} finobt={}, sparse={}, rmapbt={}\n",
        "",
        1,
        bit(f.ro_compat, 1),
        bit(f.incompat, 2),
        bit(f.ro_compat, 2)
    );
    s += &format!(
        "         ={:<22} reflink={:<4} bigtime={} inobtcount={} nrext64={}\n",
        "",
        bit(f.ro_compat, 4),
        bit(f.incompat, 8),
        bit(f.ro_compat, 8),
        bit(f.incompat, 0x20)
    );
    if newer {
        s += &format!(
            "         ={:<22} exchange={:<3} metadir={}\n",
            "",
            u32::from(exchange),
            u32::from(metadir)
        );
    }
    s += &format!(
        "data     ={:<22} bsize={:<6} blocks={}, imaxpct={}\n",
        "", g.blocksize, g.dblocks, g.imax_pct
    );
    s += &format!(
        "         ={:<22} sunit={:<6} swidth={} blks\n",
        "", g.unit, g.width
    );
    s += &format!(
        "naming   =version {:<14} bsize={:<6} ascii-ci=0, ftype=1{}\n",
        2,
        g.dir_block_size(),
        if newer {
            format!(", parent={}", u32::from(parent))
        } else {
            String::new()
        }
    );
    s += &format!(
        "log      ={:<22} bsize={:<6} blocks={}, version=2\n",
        g.logdev.as_deref().unwrap_or("internal log"),
        g.blocksize,
        g.logblocks
    );
    s += &format!(
        "         ={:<22} sectsz={:<5} sunit={} blks, lazy-count=1\n",
        "",
        log_sectsz,
        g.logsunit / g.blocksize
    );
    s += &format!(
        "realtime ={:<22} extsz={:<6} blocks={}, rtextents={}\n",
        g.rt.as_ref().map_or("none", |rt| rt.name.as_str()),
        u64::from(g.rextsize) * u64::from(g.blocksize),
        g.rblocks,
        g.rextents
    );
    if newer {
        // Without a realtime section rgsize is the group size the
        // superblock records for a metadata directory filesystem.
        s += &format!(
            "         ={:<22} rgcount={:<4} rgsize={} extents\n",
            "",
            g.metadir.as_ref().map_or(0, |m| m.rgcount),
            g.metadir.as_ref().map_or(0, |m| m.rgextents)
        );
        s += &format!(
            "         ={:<22} zoned={:<6} start={} reserved={}\n",
            "", 0, 0, 0
        );
    }
    s
}
