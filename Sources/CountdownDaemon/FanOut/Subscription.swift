/// What a subscriber follows.
enum Subscription: Equatable {
    /// Nothing: request/reply only.
    case none
    /// Every countdown, present and future.
    case all
    /// The named countdowns.
    case names(Set<String>)
    /// Every countdown, present and future, whose key starts with this.
    case prefix(String)
}
