#() {
  type: update,
  diff: {
    #(cid) categories: {
      type: update,
      diff: {
        type: delete
      }
    },
    #(uid) full_reviews: {
      type: update,
      diff: {
        user_id: { post }
      }
    }
  }
}
