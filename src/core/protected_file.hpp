// Files whose contents decide what a privileged process does (serve's bearer token, the Slurm hooks' configuration,
// a vendor library a root recorder loads): read with the care ssh takes with authorized_keys (StrictModes), since
// whoever can change such a file, or rename another into its place, takes over what it decides.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace wattscope {

// The contents of `path`, at most max_bytes of it. Refused, with std::invalid_argument "<what> '<path>': <why>":
// anything but a regular file (a FIFO is opened without waiting for a writer; /dev/zero, a directory), a file larger
// than max_bytes (never read past max_bytes + 1), a file or any directory above it that another user could change
// (group- or world-writable, a directory without the sticky bit; owned by someone other than root or this user).
std::string read_protected_file(const std::string& path, std::string_view what, size_t max_bytes);

// The same checks on a file that is not read here (a shared library another process will dlopen): a regular file
// that only root or this user can change, in directories only they can change. Throws as read_protected_file.
void check_protected_file(const std::string& path, std::string_view what);

// A directory whose files decide what a privileged process does (the Slurm hooks' state directory: pid files the root
// epilog signals, job logs it reads back). Refused, with std::invalid_argument "<what> '<path>': <why>": anything but
// a directory (a symbolic link included), one owned by another user than this one, one that anyone else may write to
// (group- or world-writable, sticky or not: a 1777 directory lets any user plant a file in it), or a directory above
// it that another user could change (as for a protected file: a sticky one such as /tmp is allowed, since no one else
// may rename or remove a directory of ours in it).
void check_protected_directory(const std::string& path, std::string_view what);

// The configuration file `name` (alerts.toml, wattscope.toml) a command reads when none is given: the first that
// exists of $XDG_CONFIG_HOME/wattscope/NAME (else ~/.config/wattscope/NAME) and /etc/wattscope/NAME; "" when none.
std::string default_config_path(std::string_view name);

} // namespace wattscope
