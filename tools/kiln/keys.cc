// `kiln keys new NAME [--dir D]`: a CURVE key pair for an external bridge (DESIGN §2, §9). Writes
// NAME.key (secret, 0600) and NAME.pub, and prints the allowlist line that admits the bridge and where
// the broker's public key (which the bridge pins) lives.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>

#include "commands.h"
#include "kiln/core/files.h"
#include "kiln/messaging/curve.h"

namespace kiln::cli {

namespace {

std::string under(const std::string& dir, const std::string& path) {
  return std::filesystem::path(path).is_absolute() ? path : dir + "/" + path;
}

int fail(const Common& c, const std::string& error) {
  if (c.json)
    std::printf("%s\n", nlohmann::json{{"ok", false}, {"error", error}}.dump().c_str());
  else
    std::fprintf(stderr, "kiln: keys new: %s\n", error.c_str());
  return 1;
}

}  // namespace

int cmd_keys_new(const Common& c, const std::string& name, const std::string& dir) {
  if (!messaging::is_valid_bridge_name(name))
    return fail(c, "name '" + name + "': expected 1-64 characters of [A-Za-z0-9_.-]");
  if (Status st = make_dirs(dir); !st.is_ok()) return fail(c, st.message());
  std::string secret_path = dir + "/" + name + ".key";
  std::string public_path = dir + "/" + name + ".pub";
  auto pair = messaging::generate_curve_keypair();
  if (!pair.is_ok()) return fail(c, pair.status().message());
  if (Status st = messaging::write_curve_keypair(*pair, secret_path, public_path); !st.is_ok())
    return fail(c, st.message());

  const auto& bc = c.config.broker;
  const std::string& state_dir = c.config.up.state_dir;
  std::string allowlist = under(state_dir, bc.external_allowlist);
  std::string broker_public = under(state_dir, bc.external_public_key_file);
  std::string line = name + " " + pair->public_key;
  if (c.json) {
    nlohmann::json out{{"ok", true},
                       {"name", name},
                       {"secret_key_file", secret_path},
                       {"public_key_file", public_path},
                       {"public_key", pair->public_key},
                       {"allowlist_line", line},
                       {"allowlist", allowlist},
                       {"broker_public_key_file", broker_public}};
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  std::printf("wrote %s (secret, mode 0600: keep it with the bridge) and %s\n", secret_path.c_str(),
              public_path.c_str());
  std::printf("admit the bridge: add this line to the broker's allowlist %s (read on SIGHUP or change):\n",
              allowlist.c_str());
  std::printf("%s\n", line.c_str());
  std::printf(
      "the bridge pins the broker's public key, %s (created by kiln-broker on its first start with "
      "broker.external_bind set)\n",
      broker_public.c_str());
  return 0;
}

}  // namespace kiln::cli
