"""How fixtures/queries.json was written (hand-written queries and their expected tools), with
the check that every expected tool is in tools.json. Run: python3 crates/tool-search/scripts/write_queries.py"""
import json
S = lambda server, tool: {"server": server, "tool": tool}
SHOT = [S("puppeteer","puppeteer_screenshot"), S("playwright","browser_take_screenshot"), S("chrome_devtools","take_screenshot"), S("playwright_ea","playwright_screenshot"), S("browserbase","browserbase_screenshot")]
NAV = [S("puppeteer","puppeteer_navigate"), S("playwright","browser_navigate"), S("chrome_devtools","navigate_page"), S("playwright_ea","playwright_navigate"), S("browserbase","browserbase_stagehand_navigate")]
WEB = [S("brave_search","brave_web_search"), S("tavily","tavily_search"), S("exa","web_search_exa"), S("firecrawl","firecrawl_search")]
FETCHPAGE = [S("fetch","fetch"), S("firecrawl","firecrawl_scrape"), S("exa","web_fetch_exa"), S("tavily","tavily_extract")]
READ = [S("filesystem","read_text_file"), S("filesystem","read_file"), S("desktop_commander","read_file")]
LISTDIR = [S("filesystem","list_directory"), S("desktop_commander","list_directory"), S("filesystem","list_directory_with_sizes")]
MKDIR = [S("filesystem","create_directory"), S("desktop_commander","create_directory")]
MOVE = [S("filesystem","move_file"), S("desktop_commander","move_file")]
GITCOMMIT = [S("git","git_commit"), S("git_cyanheads","git_commit")]
GITLOG = [S("git","git_log"), S("git_cyanheads","git_log")]
GITSTATUS = [S("git","git_status"), S("git_cyanheads","git_status")]
GITBRANCH = [S("git","git_create_branch"), S("git_cyanheads","git_branch"), S("github","create_branch"), S("gitlab","create_branch")]
q = []
def en(text, *exp): q.append({"query": text, "lang": "en", "expect": [e for x in exp for e in (x if isinstance(x, list) else [x])]})
def zh(text, *exp): q.append({"query": text, "lang": "zh", "expect": [e for x in exp for e in (x if isinstance(x, list) else [x])]})

# English (40)
en("repeat my message back to me", S("everything","echo"))
en("add two numbers together", S("everything","get-sum"))
en("what's inside this folder", LISTDIR)
en("show me the contents of notes.txt", READ)
en("open several files at once", S("filesystem","read_multiple_files"), S("desktop_commander","read_multiple_files"))
en("make a new folder called reports", MKDIR)
en("rename report.md to final.md", MOVE)
en("print the whole folder hierarchy as a tree", S("filesystem","directory_tree"))
en("which directories am I allowed to touch", S("filesystem","list_allowed_directories"))
en("size and modification date of a file", S("filesystem","get_file_info"), S("desktop_commander","get_file_info"))
en("remember that Alice works at Acme", S("memory","create_entities"), S("memory","add_observations"))
en("look up what the knowledge graph knows about Bob", S("memory","search_nodes"), S("memory","open_nodes"))
en("think through a hard problem step by step", S("sequential_thinking","sequentialthinking"))
en("open a bug report in our GitHub repo", S("github","create_issue"))
en("merge the pull request once checks pass", S("github","merge_pull_request"))
en("find repositories about rust async runtimes", S("github","search_repositories"), S("gitlab","search_repositories"))
en("post a message to the #general channel", S("slack","slack_post_message"))
en("who is in our Slack workspace", S("slack","slack_get_users"))
en("driving directions from Berlin to Hamburg", S("google_maps","maps_directions"))
en("coordinates of the Eiffel Tower address", S("google_maps","maps_geocode"))
en("search the web for the latest Rust release notes", WEB)
en("grab a picture of the current page", SHOT)
en("go to https://example.com in the browser", NAV)
en("click the submit button", S("puppeteer","puppeteer_click"), S("playwright","browser_click"), S("chrome_devtools","click"), S("playwright_ea","playwright_click"))
en("download a web page as markdown", FETCHPAGE)
en("record a performance trace of page load", S("chrome_devtools","performance_start_trace"))
en("create a new page in Notion", S("notion","API-post-page"))
en("list pods in the cluster", S("kubernetes","kubectl_get"))
en("tail the logs of a crashing pod", S("kubernetes","kubectl_logs"))
en("scale the deployment to five replicas", S("kubernetes","kubectl_scale"))
en("install a helm chart", S("kubernetes","install_helm_chart"))
en("what time is it in Tokyo", S("time","get_current_time"))
en("convert 3pm New York time to London time", S("time","convert_time"))
en("commit the staged changes with a message", GITCOMMIT)
en("show recent commit history", GITLOG, S("github","list_commits"))
en("which files did I change but not stage", S("git","git_diff_unstaged"), S("git","git_status"), S("git_cyanheads","git_status"), S("git_cyanheads","git_diff"))
en("crawl an entire documentation site", S("firecrawl","firecrawl_crawl"), S("tavily","tavily_crawl"))
en("up-to-date docs for a library", S("context7","query-docs"), S("context7","resolve-library-id"))
en("generate an image of a cat astronaut", S("everart","generate_image"))
en("run a shell command and read its output", S("desktop_commander","start_process"), S("desktop_commander","read_process_output"))

# Chinese (40)
zh("把这段文字原样返回给我", S("everything","echo"))
zh("帮我算一下两个数的和", S("everything","get-sum"))
zh("读取文件内容", READ)
zh("看看这个目录下有哪些文件", LISTDIR)
zh("新建一个文件夹", MKDIR)
zh("把文件移动到另一个目录", MOVE)
zh("写入一个新文件", S("filesystem","write_file"), S("desktop_commander","write_file"))
zh("在文件里替换一段文字", S("filesystem","edit_file"), S("desktop_commander","edit_block"))
zh("按文件名搜索文件", S("filesystem","search_files"), S("desktop_commander","start_search"))
zh("记住我的生日是五月三号", S("memory","create_entities"), S("memory","add_observations"))
zh("删除知识图谱里的一个实体", S("memory","delete_entities"))
zh("在 GitHub 上创建一个议题", S("github","create_issue"))
zh("列出仓库里的拉取请求", S("github","list_pull_requests"))
zh("给议题添加评论", S("github","add_issue_comment"))
zh("在 GitLab 创建合并请求", S("gitlab","create_merge_request"))
zh("克隆一个仓库", S("git_cyanheads","git_clone"))
zh("查看提交历史", GITLOG, S("github","list_commits"))
zh("提交代码改动", GITCOMMIT, S("github","push_files"))
zh("查看当前仓库状态", GITSTATUS)
zh("新建一个分支", GITBRANCH)
zh("在 Slack 频道发送消息", S("slack","slack_post_message"))
zh("回复一个消息线程", S("slack","slack_reply_to_thread"))
zh("查询从北京到上海的路线", S("google_maps","maps_directions"))
zh("搜索附近的餐厅", S("google_maps","maps_search_places"), S("brave_search","brave_local_search"))
zh("在网上搜索最新新闻", WEB)
zh("打开网页 https://example.com", NAV)
zh("给网页截图", SHOT)
zh("在页面上点击登录按钮", S("puppeteer","puppeteer_click"), S("playwright","browser_click"), S("chrome_devtools","click"), S("playwright_ea","playwright_click"))
zh("填写表单", S("playwright","browser_fill_form"), S("chrome_devtools","fill_form"), S("puppeteer","puppeteer_fill"), S("playwright_ea","playwright_fill"), S("chrome_devtools","fill"))
zh("抓取网页内容", FETCHPAGE)
zh("查看浏览器控制台日志", S("playwright","browser_console_messages"), S("chrome_devtools","list_console_messages"), S("playwright_ea","playwright_console_logs"))
zh("在 Notion 中搜索页面", S("notion","API-post-search"))
zh("查看集群里的 pod", S("kubernetes","kubectl_get"))
zh("删除一个 Kubernetes 资源", S("kubernetes","kubectl_delete"))
zh("现在几点了", S("time","get_current_time"))
zh("把北京时间换算成纽约时间", S("time","convert_time"))
zh("一步一步思考这个问题", S("sequential_thinking","sequentialthinking"))
zh("查询某个库的最新文档", S("context7","query-docs"), S("context7","resolve-library-id"))
zh("生成一张图片", S("everart","generate_image"))
zh("终止一个进程", S("desktop_commander","kill_process"), S("desktop_commander","force_terminate"))
json.dump(q, open(__import__("os").path.join(__import__("os").path.dirname(__file__), "../fixtures/queries.json"),"w"), ensure_ascii=False, indent=1)
tools = json.load(open(__import__("os").path.join(__import__("os").path.dirname(__file__), "../fixtures/tools.json")))
have = {(s["name"], t["name"]) for s in tools["servers"] for t in s["tools"]}
bad = [(x["query"], e) for x in q for e in x["expect"] if (e["server"], e["tool"]) not in have]
print(len(q), sum(x["lang"]=="zh" for x in q), "bad:", bad)
# how many English queries contain a word of an expected tool's name verbatim
import re
def words(n): return set(w for w in re.split(r"[_\-]", n.lower()) if len(w) > 2)
hit = sum(1 for x in q if x["lang"]=="en" and any(w in x["query"].lower().split() for e in x["expect"] for w in words(e["tool"])))
print("en queries with a verbatim tool-name word:", hit, "of", sum(x["lang"]=="en" for x in q))
