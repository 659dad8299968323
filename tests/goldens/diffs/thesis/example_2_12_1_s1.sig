#() {
  type: update,
  diff: {
    #(uid) full_reviews: {
      type: update,
      diff: {
        user_id: { post }
      }
    }
  }
}
