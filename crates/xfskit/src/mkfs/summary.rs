//! The geometry summary mkfs.xfs 6.1 prints before formatting (and alone with `-N`).

use super::geometry::MkfsGeometry;

const VERSION_SECTORBIT: u16 = 0x0800;

/// Render the geometry exactly like mkfs.xfs 6.1's summary block
/// (`meta-data=` ... `realtime =`), ending with a newline.
pub fn geometry_summary(g: &MkfsGeometry) -> String {
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
    s += &format!(
        "data     ={:<22} bsize={:<6} blocks={}, imaxpct={}\n",
        "", g.blocksize, g.dblocks, g.imax_pct
    );
    s += &format!(
        "         ={:<22} sunit={:<6} swidth={} blks\n",
        "", g.unit, g.width
    );
    s += &format!(
        "naming   =version {:<14} bsize={:<6} ascii-ci=0, ftype=1\n",
        2,
        g.dir_block_size()
    );
    s += &format!(
        "log      ={:<22} bsize={:<6} blocks={}, version=2\n",
        "internal log", g.blocksize, g.logblocks
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
    s
}
