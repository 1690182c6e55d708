"""Service file templates for `recalld service install`.

The same text lives in the repository's `config/` folder for people who install by hand; a test
keeps the two identical. `$arguments` is the command line, already quoted for the format;
`$environment` the installer's `RECALLD_*` (and XDG base directory) variables, so the service
uses the store, socket and config of the shell that installed it.
"""

from __future__ import annotations

SYSTEMD_UNIT = """\
[Unit]
Description=recalld, local-first long-term memory daemon
After=default.target

[Service]
Type=simple
ExecStart=$arguments
Restart=on-failure
RestartSec=5
# Exit code 3: recalld could not start (bad config, store locked or embedded with another
# model). Restarting would fail the same way, so wait for the user.
RestartPreventExitStatus=3
# SIGTERM drains the ingest queue and closes the store; give it time.
KillSignal=SIGTERM
TimeoutStopSec=30
Environment=PYTHONUNBUFFERED=1
$environment
[Install]
WantedBy=default.target
"""

LAUNCHD_PLIST = """\
<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<plist version="1.0">
<dict>
  <key>Label</key>
  <string>$label</string>
  <key>ProgramArguments</key>
  <array>
$arguments
  </array>
  <key>RunAtLoad</key>
  <true/>
  <!-- Restart after a crash, not after a clean stop or a start-up failure. -->
  <key>KeepAlive</key>
  <dict>
    <key>SuccessfulExit</key>
    <false/>
  </dict>
  <key>ExitTimeOut</key>
  <integer>30</integer>
  <key>ProcessType</key>
  <string>Background</string>
  <key>StandardErrorPath</key>
  <string>$log</string>
  <key>EnvironmentVariables</key>
  <dict>
$environment
  </dict>
</dict>
</plist>
"""
