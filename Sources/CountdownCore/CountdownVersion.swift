/// The version of countdownd and cdctl, shown in the greeting and by `--version`.
public enum CountdownVersion {
    /// The current release.
    public static let current = "0.1.0"
}
