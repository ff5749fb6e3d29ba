//! The address a job's server binds: the IPv4 address of `--iface`, else
//! the first non-loopback IPv4 address of an interface that is up (the
//! job network on a node with one), else loopback.

use std::net::Ipv4Addr;

/// One interface address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IfAddr {
    pub name: String,
    pub addr: Ipv4Addr,
    pub up: bool,
}

/// Every IPv4 address of this node's interfaces, in the kernel's order.
#[allow(unsafe_code)]
pub fn addresses() -> std::io::Result<Vec<IfAddr>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list we free below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut out = Vec::new();
    let mut p = head;
    while !p.is_null() {
        // SAFETY: `p` is a node of the list getifaddrs returned, alive until freeifaddrs.
        let ifa = unsafe { &*p };
        if !ifa.ifa_addr.is_null() {
            // SAFETY: ifa_addr points at a sockaddr; its family says which.
            let family = i32::from(unsafe { (*ifa.ifa_addr).sa_family });
            if family == libc::AF_INET {
                // SAFETY: an AF_INET address is a sockaddr_in.
                let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
                // SAFETY: ifa_name is a NUL-terminated string.
                let name = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) }.to_string_lossy().into_owned();
                out.push(IfAddr { name, addr: Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)), up: ifa.ifa_flags & libc::IFF_UP as u32 != 0 });
            }
        }
        p = ifa.ifa_next;
    }
    // SAFETY: `head` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}

/// Picks the address (see the module's documentation).
pub fn choose(all: &[IfAddr], iface: Option<&str>) -> Result<Ipv4Addr, String> {
    if let Some(want) = iface {
        return all.iter().find(|a| a.name == want).map(|a| a.addr).ok_or_else(|| {
            let names: Vec<&str> = all.iter().map(|a| a.name.as_str()).collect();
            format!("no IPv4 address on interface {want:?} (this node has: {})", names.join(", "))
        });
    }
    Ok(all.iter().find(|a| a.up && !a.addr.is_loopback()).map_or(Ipv4Addr::LOCALHOST, |a| a.addr))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(name: &str, addr: [u8; 4], up: bool) -> IfAddr {
        IfAddr { name: name.into(), addr: Ipv4Addr::from(addr), up }
    }

    #[test]
    fn the_job_network_is_picked() {
        let all = [a("lo", [127, 0, 0, 1], true), a("ib0", [10, 1, 0, 5], false), a("eth0", [198, 18, 0, 11], true), a("ib1", [10, 2, 0, 5], true)];
        assert_eq!(choose(&all, None).unwrap(), Ipv4Addr::new(198, 18, 0, 11));
        assert_eq!(choose(&all, Some("ib1")).unwrap(), Ipv4Addr::new(10, 2, 0, 5));
        assert!(choose(&all, Some("hsn0")).unwrap_err().contains("lo, ib0, eth0, ib1"));
        assert_eq!(choose(&all[..1], None).unwrap(), Ipv4Addr::LOCALHOST);
        // This machine has at least loopback.
        assert!(addresses().unwrap().iter().any(|x| x.addr.is_loopback()));
    }
}
