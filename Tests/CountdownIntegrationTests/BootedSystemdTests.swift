import CountdownCore
import Foundation
import Glibc
import Testing

/// The package `make deb` built for this version, if there is one.
private let builtPackage: String? = {
    let directory = packageRoot + "/.build/deb"
    let name = (try? FileManager.default.contentsOfDirectory(atPath: directory))?
        .first { $0.hasPrefix("countdownd_\(CountdownVersion.current)_") && $0.hasSuffix(".deb") }
    return name.map { directory + "/" + $0 }
}()

/// The minimal bookworm root `make test` bootstraps once (mmdebstrap), as a tarball.
private let bootedImage = packageRoot + "/.build/booted/bookworm-minbase-2.tar"

/// Whether that tarball is there (a regular file, not a directory left by a failed bootstrap).
private let bootedImageExists: Bool = {
    var isDirectory: ObjCBool = false
    return FileManager.default.fileExists(atPath: bootedImage, isDirectory: &isDirectory) && !isDirectory.boolValue
}()

extension Integration {
    @Suite("The Debian package: self-contained binaries, and a booted systemd (systemd-nspawn)")
    struct BootedSystemdTests {
        @Test(
            "the packaged binaries need nothing of the Swift toolchain: ldd names only the system's libraries",
            .enabled(if: builtPackage != nil, "no package for this version in .build/deb: make test builds it as root (make deb)")
        )
        func selfContained() throws {
            let package = try #require(builtPackage)
            let directory = TemporaryDirectory()
            #expect(try runCommand("/usr/bin/dpkg-deb", ["-x", package, directory.path]).status == 0)
            for binary in ["countdownd", "cdctl"] {
                let ldd = try runCommand("/usr/bin/ldd", [directory.file("usr/bin/\(binary)")])
                #expect(ldd.status == 0, "\(ldd.stderr)")
                // This machine has the toolchain: a binary that needed it would resolve there.
                let libraries = ldd.stdout.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
                #expect(!libraries.isEmpty)
                for library in libraries {
                    #expect(!library.contains("swift") && !library.contains("not found") && !library.contains("/opt/"), "\(binary): \(library)")
                }
                #expect(libraries.contains { $0.hasPrefix("libc.so") })
                if binary == "countdownd" {
                    #expect(libraries.contains { $0.hasPrefix("libsystemd.so") } && libraries.contains { $0.hasPrefix("libsqlite3.so") })
                }
            }
        }

        @Test("debian/changelog's version is the daemon's")
        func packageVersion() throws {
            let changelog = try String(contentsOfFile: packageRoot + "/debian/changelog", encoding: .utf8)
            #expect(changelog.hasPrefix("countdownd (\(CountdownVersion.current)) "), "\(changelog.prefix(40))")
        }

        @Test(
            "make install installs what was built, never builds or fetches, with explicit modes whatever the umask, the guides included",
            .enabled(if: FileManager.default.isExecutableFile(atPath: packageRoot + "/.build/release/countdownd"), "no release build: make release (make test makes one as root)"),
            .enabled(if: toolExists("/usr/bin/make"), "make is not installed")
        )
        func installForPackagers() throws {
            let dryRun = try runCommand("/usr/bin/make", ["-C", packageRoot, "-n", "install"])
            #expect(dryRun.status == 0 && !dryRun.stdout.contains("swift build") && !dryRun.stdout.contains("apt-get"), "\(dryRun.stdout)")
            let destination = TemporaryDirectory()
            let installed = try runCommand("/bin/sh", ["-c", "umask 077 && make -C '\(packageRoot)' install DESTDIR='\(destination.path)' PREFIX=/usr"])
            #expect(installed.status == 0, "\(installed.stdout)\(installed.stderr)")
            func mode(_ path: String) -> mode_t {
                var info = stat()
                return stat(destination.file(path), &info) == 0 ? info.st_mode & 0o7777 : 0
            }
            for file in ["usr/bin/countdownd", "usr/bin/cdctl"] { #expect(mode(file) == 0o755, "\(file)") }
            for file in [
                "usr/lib/systemd/system/countdownd.service", "usr/lib/systemd/system/countdownd.socket",
                "usr/lib/systemd/user/countdownd.service", "usr/lib/systemd/user/countdownd.socket",
                "usr/lib/sysusers.d/countdownd.conf", "usr/share/man/man8/countdownd.8", "usr/share/man/man1/cdctl.1",
                "usr/share/doc/countdownd/PROTOCOL.md", "usr/share/doc/countdownd/CLUSTER.md", "usr/share/doc/countdownd/countdownd-cluster.conf",
                "usr/etc/countdownd/countdownd.conf",
            ] {
                #expect(mode(file) == 0o644, "\(file) is \(String(mode(file), radix: 8))")
            }
            for directory in ["usr", "usr/bin", "usr/lib/systemd", "usr/share/man", "usr/share/doc/countdownd"] {
                #expect(mode(directory) == 0o755, "\(directory) is \(String(mode(directory), radix: 8))")
            }
            let unit = try String(contentsOfFile: destination.file("usr/lib/systemd/system/countdownd.service"), encoding: .utf8)
            #expect(unit.contains("ExecStart=/usr/bin/countdownd --config /usr/etc/countdownd/countdownd.conf") && !unit.contains("@BINDIR@") && !unit.contains("@SYSCONFDIR@"), "\(unit)")
        }

        @Test(
            "installed with dpkg into a booted bookworm: socket activation, groups, restarts, an upgrade, the watchdog, a clean stop, a quiet journal, purge",
            .enabled(if: getuid() == 0, "needs root to boot a container with systemd-nspawn"),
            .enabled(if: toolExists("/usr/bin/systemd-nspawn") && toolExists("/usr/bin/nsenter"), "systemd-nspawn (systemd-container) is not installed"),
            .enabled(if: builtPackage != nil, "no package for this version in .build/deb: make test builds it as root (make deb)"),
            .enabled(if: bootedImageExists, "no bookworm root in .build/booted: make test bootstraps one with mmdebstrap, which needs Debian's mirror")
        )
        func bootedSystemd() throws {
            let package = try #require(builtPackage)
            let result = try runCommand("/bin/bash", [packageRoot + "/Tests/Scripts/booted-systemd.sh", package, bootedImage], timeout: 600)
            let checks = result.stdout.split(separator: "\n").filter { $0.hasPrefix("ok - ") || $0.hasPrefix("not ok - ") }
            #expect(checks.count >= 35, "every check ran: \(result.stdout)\(result.stderr)")
            // Among them: no thread-priority noise in the journal. (libdispatch's manager thread,
            // made for any Dispatch source, timer or asyncAfter, renices itself to -4, which a
            // service without CAP_SYS_NICE may not; the daemon makes none.)
            for check in checks where check.hasPrefix("not ok") {
                Issue.record("\(check)\n\(result.stdout)")
            }
            #expect(result.status == 0, "\(result.stderr)")
        }
    }
}
